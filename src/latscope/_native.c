/* latscope's optional C part (setup.py builds it; latscope.native is the one door to it, and
 * every function has a pure-Python twin that stays the reference: latscope.twins,
 * latscope.fastread).
 *
 * scan_stream: one C-level pass over a finished streamed response: HTTP/1.1 chunked framing,
 * SSE events, token events and their arrival times (latscope.load.response.read_stream_quick).
 * GapStore: a run's ITL gaps, added from each request's token times in one call
 * (latscope.itlpool.ItlPool).
 * record_line: a record's requests.jsonl line, its token times as gaps
 * (latscope.rundir.record_line); json_gaps: the ITL gaps of such a line, read back without a
 * Python int per time (latscope.rundir.record_without_times: every pass after a run).
 * Dropped (2026-12, issue #49): gaps_ms (no caller but tests), last_int and usual_head (their
 * ~1.5 us a response did not show in a real run: docs/bench.md, "The C behind one door").
 *
 * Why C: the parse of a finished response bounds one client process's ceiling
 * (benchmarks/client_ceiling.py). The pure-Python fast reader needs ~1.1 us per streamed token
 * on whole-buffer bytes methods, this pass ~0.06 (benchmarks/parse_cost.py). Built with
 * -DLATSCOPE_NO_SIMD it takes the portable path that hosts without SSE2 (aarch64) take, with
 * -DLATSCOPE_NO_AVX2 the SSE2 one that x86 hosts without AVX2 take, with -DLATSCOPE_NO_AVX512
 * the AVX2 one that hosts without AVX-512BW take (tests/unit/test_native.py holds them equal).
 *
 * What it answers must be exactly what the exact reader (response._read_stream over
 * response.dechunk) answers, or nothing: it accepts only the common shape (hex size lines, no
 * chunk extensions or trailers, no CR in the data, every SSE event one "data: {...}" line,
 * "data: [DONE]" last, no error event, no per-chunk usage) and returns None for anything else,
 * so the exact reader runs. tests/unit/fuzz (target "sse_chunked") and
 * tests/unit/load/test_client_parse.py hold the two readers equal.
 *
 * scan_stream(reads, skip=0) -> (token_times, tail) | None
 *   reads: list of (arrival_ns, bytes), the raw chunked body as the socket gave it, after the
 *     first `skip` bytes of the first read (the HTTP head, when one read brought both).
 *   token_times: for each token event, the arrival_ns object of the read that holds the second
 *     LF of the event's terminating blank line (the read that completed the event).
 *   tail: the de-chunked body from the start of its last three events to its end (where the
 *     exact reader looks for usage and the server's metrics).
 */
#define PY_SSIZE_T_CLEAN
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include <Python.h>
#include <structmember.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__) && !defined(LATSCOPE_NO_SIMD)
#include <emmintrin.h>
#endif

static const char END[] = "data: [DONE]\n\n\r\n0\r\n\r\n";
#define END_LEN (sizeof(END) - 1)
#define DONE_EVENT "data: [DONE]"
#define DONE_LEN 12
#define MAX_SIZE_DIGITS 15

typedef struct {
    const char *raw;        /* the raw chunked body: the one read's buffer past the head, or */
    char *joined;           /* ... the reads joined (owned) */
    Py_ssize_t raw_len;
    Py_ssize_t *read_ends;  /* cumulative end offset of each read in raw */
    PyObject **read_ns;     /* borrowed: each read's arrival time */
    Py_ssize_t nreads, read; /* ... and the cursor of time_at (events come in order) */
    char *body;             /* the de-chunked copy (read only where an event spans chunks) */
    Py_ssize_t body_len;
    Py_ssize_t *seg_body;   /* per chunk: where its data starts in body ... */
    Py_ssize_t *seg_raw;    /* ... and in raw */
    Py_ssize_t nsegs, seg;
    PyObject **tokens;      /* borrowed: token event times, in order */
    Py_ssize_t ntokens;
    const char *ev_start[3], *ev_end[3];  /* the last three events, their blank line included */
    Py_ssize_t nevents;
    int done, first_token;
} Scan;

static void scan_free(Scan *s) {
    free(s->joined);
    free(s->read_ends);
    free(s->read_ns);
    free(s->body);
    free(s->seg_body);
    free(s->seg_raw);
    free(s->tokens);
}

/* 1 when the reads are a list of (object, bytes) pairs, the body (past `skip` bytes of the
 * first read: the HTTP head) at s->raw; 0 to decline, -1 on a memory error (exception set). */
static int join_reads(Scan *s, PyObject *reads, Py_ssize_t skip) {
    if (!PyList_Check(reads)) return 0;
    Py_ssize_t n = PyList_GET_SIZE(reads), total = -skip;
    if (n == 0) return 0;
    s->nreads = n;
    s->read_ends = malloc(sizeof(Py_ssize_t) * n);
    s->read_ns = malloc(sizeof(PyObject *) * n);
    if (!s->read_ends || !s->read_ns) { PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(reads, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) return 0;
        PyObject *data = PyTuple_GET_ITEM(item, 1);
        if (!PyBytes_Check(data)) return 0;
        s->read_ns[i] = PyTuple_GET_ITEM(item, 0);
        total += PyBytes_GET_SIZE(data);
        if (total < 0) return 0;  /* a skip past the first read */
        s->read_ends[i] = total;
    }
    s->raw_len = total;
    if (n == 1) {
        s->raw = PyBytes_AS_STRING(PyTuple_GET_ITEM(PyList_GET_ITEM(reads, 0), 1)) + skip;
        return 1;
    }
    s->joined = malloc(total ? total : 1);
    if (!s->joined) { PyErr_NoMemory(); return -1; }
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *data = PyTuple_GET_ITEM(PyList_GET_ITEM(reads, i), 1);
        Py_ssize_t from = i == 0 ? skip : 0;
        memcpy(s->joined + at, PyBytes_AS_STRING(data) + from, PyBytes_GET_SIZE(data) - from);
        at += PyBytes_GET_SIZE(data) - from;
    }
    s->raw = s->joined;
    return 1;
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The chunk at *pos: 1 with its data at *data (*size bytes, followed by CR LF), *pos moved
 * past it; 2 at the zero-size last chunk when it ends raw (no trailer); 0 to decline. */
static int next_chunk(const Scan *s, Py_ssize_t *pos, Py_ssize_t *data, Py_ssize_t *size) {
    const char *raw = s->raw;
    Py_ssize_t len = s->raw_len, p = *pos, n = 0, digits = 0;
    int v;
    while (p < len && (v = hex_value(raw[p])) >= 0) {
        if (++digits > MAX_SIZE_DIGITS) return 0;
        n = n * 16 + v;
        p++;
    }
    if (digits == 0 || p + 2 > len || raw[p] != '\r' || raw[p + 1] != '\n') return 0;
    p += 2;
    if (n == 0)
        return p + 2 == len && raw[p] == '\r' && raw[p + 1] == '\n' ? 2 : 0;
    if (n > len - p - 2 || raw[p + n] != '\r' || raw[p + n + 1] != '\n') return 0;
    *data = p;
    *size = n;
    *pos = p + n + 2;
    return 1;
}

/* Python's bytes-regex \s but LF: inside an event (which ends at its first LF) the same. */
static int is_line_space(char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

/* After a key's closing quote at `p`, inside an event: \s* ':' \s* then, when `quote` is set,
 * '"'. The event ends at its first LF, which stops the whitespace runs as the event's end
 * stops the regex's; `end` only bounds the reading. */
static int colon_follows(const char *p, const char *end, int quote) {
    while (p < end && is_line_space(*p)) p++;
    if (p >= end || *p != ':') return 0;
    if (!quote) return 1;
    p++;
    while (p < end && is_line_space(*p)) p++;
    return p < end && *p == '"';
}

/* `key` (n bytes), then '"' and what colon_follows asks, at p. Only reached after the first
 * byte matched (a switch on it): a call to memcmp per quote was most of the pass's time. A key
 * that runs into the event's LF fails on it (an LF is not a letter or a quote). */
static inline int key_at(const char *p, const char *end, const char *key, size_t n, int quote) {
    return (size_t)(end - p) > n && p[n] == '"' && memcmp(p, key, n) == 0
        && colon_follows(p + n + 1, end, quote);
}

/* A key starting at k (just past a quote): a token mark or a role. */
static inline void key_of(const char *k, const char *end, int *token, int *role) {
    switch (*k) {
    case 't':
        *token |= key_at(k, end, "text", 4, 1);
        break;
    case 'c':
        *token |= key_at(k, end, "content", 7, 1);
        break;
    case 'r':
        *token |= key_at(k, end, "reasoning", 9, 1) || key_at(k, end, "reasoning_content", 17, 1);
        *role |= key_at(k, end, "role", 4, 0);
        break;
    default:
        break;
    }
}

/* One event from `ev`: its end (the first LF before `limit`, or NULL), whether a CR comes
 * before it, and the exact reader's two regexes searched in it:
 * a token mark "(?:text|content|reasoning_content|reasoning)"\s*:\s*" and a role "role"\s*:
 * A candidate is a quote, then 't', 'c' or 'r', then 'e' or 'o' (the first letters of those
 * keys); key_of checks each exactly. With SIMD one pass over the event finds its LF, its CRs
 * and its candidates, a block of positions at once: 16 with SSE2, 32 with AVX2 where the CPU
 * has it (chosen when the module loads; where a chunk holds one event, line_avx2 or, with
 * AVX-512BW, line_avx512 tests it whole first). A vLLM event has ~24 quotes; a quote and one letter
 * let ~5 through ("created", "choices", ...) and their checks, mispredicted branches, were ~30%
 * of the pass; two letters let ~2 through. The blocks read 2 bytes past `limit` (the callers'
 * regions are followed by a chunk's CR LF, or by slack); the last block overlaps the one before
 * (a position tested twice is harmless: it held no LF, and marks and CRs are or-ed). */
#define KEY_MIN 7  /* the shortest match, "role": from its quote to its colon */

static const char *event_scalar(const char *ev, const char *limit, int *token, int *role,
                                int *cr) {
    const char *lf = memchr(ev, '\n', limit - ev);
    if (lf == NULL) return NULL;
    *cr = memchr(ev, '\r', lf - ev) != NULL;
    for (const char *q = ev; q + KEY_MIN <= lf; q++)
        if (*q == '"') key_of(q + 1, lf, token, role);
    return lf;
}

#if defined(__SSE2__) && !defined(LATSCOPE_NO_SIMD)
/* One block's byte masks (bit i: the byte at at + i), as both SIMD widths compute them:
 * `keys` (a quote followed by a key's first two letters), `lfs`, `crs`. The key candidates
 * and CRs before the block's first LF are the event's (each candidate checked up to that LF);
 * returns the LF's address, or NULL where the block holds none (the event goes on). */
static inline const char *block_masks(const char *at, unsigned keys, unsigned lfs,
                                      unsigned crs, const char *limit, int *token, int *role,
                                      int *cr) {
    const char *end = limit;
    if (lfs) {
        unsigned before = (unsigned)((1ull << __builtin_ctz(lfs)) - 1);
        keys &= before;
        crs &= before;
        end = at + __builtin_ctz(lfs);
    }
    *cr |= crs != 0;
    for (; keys; keys &= keys - 1) key_of(at + __builtin_ctz(keys) + 1, end, token, role);
    return lfs ? end : NULL;
}

static const char *event_sse2(const char *ev, const char *limit, int *token, int *role,
                              int *cr) {
    const Py_ssize_t width = 16;
    if (limit - ev < width) return event_scalar(ev, limit, token, role, cr);
    const __m128i quote = _mm_set1_epi8('"'), t = _mm_set1_epi8('t'), c = _mm_set1_epi8('c'),
                  r = _mm_set1_epi8('r'), e = _mm_set1_epi8('e'), o = _mm_set1_epi8('o'),
                  nl = _mm_set1_epi8('\n'), ret = _mm_set1_epi8('\r');
    for (const char *at = ev;; at += width) {
        if (at + width > limit) at = limit - width;
        __m128i b0 = _mm_loadu_si128((const __m128i *)at);
        __m128i b1 = _mm_loadu_si128((const __m128i *)(at + 1));
        __m128i b2 = _mm_loadu_si128((const __m128i *)(at + 2));
        __m128i first = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(b1, t), _mm_cmpeq_epi8(b1, c)),
                                     _mm_cmpeq_epi8(b1, r));
        __m128i second = _mm_or_si128(_mm_cmpeq_epi8(b2, e), _mm_cmpeq_epi8(b2, o));
        unsigned keys = (unsigned)_mm_movemask_epi8(
            _mm_and_si128(_mm_and_si128(_mm_cmpeq_epi8(b0, quote), first), second));
        unsigned lfs = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(b0, nl));
        unsigned crs = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(b0, ret));
        const char *end = block_masks(at, keys, lfs, crs, limit, token, role, cr);
        if (end != NULL) return end;
        if (at + width >= limit) return NULL;
    }
}
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(LATSCOPE_NO_SIMD) \
    && !defined(LATSCOPE_NO_AVX2)
#include <immintrin.h>
#define HAVE_AVX2_PATH 1
/* The 32 places at `at`: their key candidates' bit mask, and the block itself in *block (for
 * its LFs and CRs); reads at + 33 and at + 34 too. */
__attribute__((target("avx2")))
static inline unsigned candidates_avx2(const char *at, __m256i *block) {
    __m256i b0 = _mm256_loadu_si256((const __m256i *)at);
    __m256i b1 = _mm256_loadu_si256((const __m256i *)(at + 1));
    __m256i b2 = _mm256_loadu_si256((const __m256i *)(at + 2));
    __m256i first = _mm256_or_si256(_mm256_or_si256(_mm256_cmpeq_epi8(b1, _mm256_set1_epi8('t')),
                                                    _mm256_cmpeq_epi8(b1, _mm256_set1_epi8('c'))),
                                    _mm256_cmpeq_epi8(b1, _mm256_set1_epi8('r')));
    __m256i second = _mm256_or_si256(_mm256_cmpeq_epi8(b2, _mm256_set1_epi8('e')),
                                     _mm256_cmpeq_epi8(b2, _mm256_set1_epi8('o')));
    *block = b0;
    return (unsigned)_mm256_movemask_epi8(_mm256_and_si256(
        _mm256_and_si256(_mm256_cmpeq_epi8(b0, _mm256_set1_epi8('"')), first), second));
}

__attribute__((target("avx2")))
static inline unsigned bytes_avx2(__m256i block, char c) {
    return (unsigned)_mm256_movemask_epi8(_mm256_cmpeq_epi8(block, _mm256_set1_epi8(c)));
}

__attribute__((target("avx2")))
static const char *event_avx2(const char *ev, const char *limit, int *token, int *role,
                              int *cr) {
    const Py_ssize_t width = 32;
    if (limit - ev < width) return event_sse2(ev, limit, token, role, cr);
    for (const char *at = ev;; at += width) {
        if (at + width > limit) at = limit - width;
        __m256i block;
        unsigned keys = candidates_avx2(at, &block);
        const char *end = block_masks(at, keys, bytes_avx2(block, '\n'), bytes_avx2(block, '\r'),
                                      limit, token, role, cr);
        if (end != NULL) return end;
        if (at + width >= limit) return NULL;
    }
}

/* The usual chunk holds one event (a server's write of one token): its line is the chunk's data
 * but the blank line's two LFs. line_avx2 tests that guess on [p, end): 1 where no LF and no CR
 * lie in it (token and role set, as event_avx2 sets them), 0 where one does (the caller then
 * searches the region event by event, and guesses no more in it). Its blocks only ask whether
 * an LF or CR is there, not where (event_avx2's test of where mispredicted), and read nothing
 * past end + 2. Needs end - p >= 32. With read_events_with's inlining: the pass ~12% faster
 * on the dev box (AMD EPYC), ~11% on a 16-core Intel Xeon host (benchmarks/parse_cost.py). */
__attribute__((target("avx2")))
static inline int line_avx2(const char *p, const char *end, int *token, int *role) {
    for (const char *at = p;; at += 32) {
        unsigned tested = 0;  /* the last block overlaps the one before: its first positions */
        if (at + 32 > end) {
            tested = (unsigned)(at - (end - 32));
            at = end - 32;
        }
        __m256i block;
        unsigned keys = candidates_avx2(at, &block);
        if (bytes_avx2(block, '\n') | bytes_avx2(block, '\r')) return 0;
        for (keys &= ~0u << tested; keys; keys &= keys - 1)
            key_of(at + __builtin_ctz(keys) + 1, end, token, role);
        if (at + 32 >= end) return 1;
    }
}
#endif

#if defined(HAVE_AVX2_PATH) && !defined(LATSCOPE_NO_AVX512)
#define HAVE_AVX512_PATH 1
/* line_avx2 with 64-byte blocks, where the CPU has AVX-512BW: a vLLM token event (120-250
 * bytes) takes 2-4 blocks instead of 4-8, the compares give bit masks without a movemask, and
 * the last block is a masked load (nothing read past end + 2, no overlap, any length). On the
 * Intel Xeon host the pass took 0.77-0.84 of the time it took before (line_avx2: 0.89-0.96);
 * on the dev box's AMD EPYC, which splits 512-bit work in two, the same as line_avx2. */
__attribute__((target("avx512bw")))
static inline int line_avx512(const char *p, const char *end, int *token, int *role) {
    const __m512i quote = _mm512_set1_epi8('"'), t = _mm512_set1_epi8('t'),
                  c = _mm512_set1_epi8('c'), r = _mm512_set1_epi8('r'),
                  e = _mm512_set1_epi8('e'), o = _mm512_set1_epi8('o'),
                  nl = _mm512_set1_epi8('\n'), ret = _mm512_set1_epi8('\r');
    for (const char *at = p; at < end; at += 64) {
        Py_ssize_t left = end - at;
        __mmask64 in = left >= 64 ? ~0ull : (1ull << left) - 1;
        __m512i b0 = _mm512_maskz_loadu_epi8(in, at);
        __m512i b1 = _mm512_maskz_loadu_epi8(in, at + 1);
        __m512i b2 = _mm512_maskz_loadu_epi8(in, at + 2);
        if (_mm512_cmpeq_epi8_mask(b0, nl) | _mm512_cmpeq_epi8_mask(b0, ret)) return 0;
        __mmask64 keys = _mm512_cmpeq_epi8_mask(b0, quote)
            & (_mm512_cmpeq_epi8_mask(b1, t) | _mm512_cmpeq_epi8_mask(b1, c)
               | _mm512_cmpeq_epi8_mask(b1, r))
            & (_mm512_cmpeq_epi8_mask(b2, e) | _mm512_cmpeq_epi8_mask(b2, o));
        for (; keys; keys &= keys - 1) key_of(at + __builtin_ctzll(keys) + 1, end, token, role);
    }
    return 1;
}
#endif

typedef const char *(*EventFn)(const char *, const char *, int *, int *, int *);
typedef int (*LineFn)(const char *, const char *, int *, int *);
static const char *event_portable(const char *ev, const char *limit, int *token, int *role,
                                  int *cr) {
#if defined(__SSE2__) && !defined(LATSCOPE_NO_SIMD)
    return event_sse2(ev, limit, token, role, cr);
#else
    return event_scalar(ev, limit, token, role, cr);
#endif
}
static const char *search_path = "portable";

/* The read that holds raw offset `r`; the cursor only moves forward (events come in order). */
static PyObject *time_at(Scan *s, Py_ssize_t r) {
    while (s->read + 1 < s->nreads && s->read_ends[s->read] <= r) s->read++;
    return s->read_ns[s->read];
}

/* The same for body offset `b` of the de-chunked copy. */
static PyObject *time_of_body(Scan *s, Py_ssize_t b) {
    while (s->seg + 1 < s->nsegs && s->seg_body[s->seg + 1] <= b) s->seg++;
    return time_at(s, s->seg_raw[s->seg] + (b - s->seg_body[s->seg]));
}

/* The events in [p, limit) (de-chunked data, or in place one chunk's data): 1 when each is
 * one "data: {...}" line or the last one "data: [DONE]", with its blank line, and they fill
 * the region; token times go to s->tokens. 0 to decline (no error event, no usage in the first
 * token event, no CR); 2 in place when an event does not end in its chunk. */
static inline __attribute__((always_inline)) int
read_events_with(EventFn search, LineFn line, Scan *s, const char *p, const char *limit,
                 int in_place) {
    int one = line != NULL && in_place && limit - p >= 34 && limit[-1] == '\n'
              && limit[-2] == '\n';  /* worth the guess that the chunk is one event */
    while (p < limit) {
        int token = 0, role = 0, cr = 0;
        const char *lf = NULL;
        if (one && line(p, limit - 2, &token, &role)) {
            lf = limit - 2;
        } else {
            one = token = role = 0;
            lf = search(p, limit, &token, &role, &cr);
        }
        if (lf == NULL || lf + 1 >= limit) return in_place ? 2 : 0;
        if (lf[1] != '\n' || cr || s->done) return 0;  /* CR LF line ends: the exact reader */
        Py_ssize_t n = lf - p;
        s->ev_start[s->nevents % 3] = p;
        s->ev_end[s->nevents % 3] = lf + 2;
        s->nevents++;
        if (n == DONE_LEN && memcmp(p, DONE_EVENT, DONE_LEN) == 0) {
            s->done = 1;
        } else {
            if (n < 8 || memcmp(p, "data: {", 7) != 0 || p[n - 1] != '}') return 0;
            if (token && !role) {
                if (s->first_token && memmem(p, n, "\"completion_tokens\"", 19) != NULL)
                    return 0;  /* usage per chunk: the exact reader counts tokens per chunk */
                s->first_token = 0;
                s->tokens[s->ntokens++] = in_place ? time_at(s, (lf + 1) - s->raw)
                                                   : time_of_body(s, (lf + 1) - s->body);
            } else if (memmem(p, n, "\"error\"", 7) != NULL) {
                return 0;  /* an error event: the exact reader words it */
            }
        }
        p = lf + 2;
    }
    return 1;
}

/* read_events_with and its searches compiled as one (inlined, their constants set once per
 * region, not per event, no call through a pointer per event): once per instruction set. */
typedef int (*ReadFn)(Scan *, const char *, const char *, int);
static int read_events_portable(Scan *s, const char *p, const char *limit, int in_place) {
    return read_events_with(event_portable, NULL, s, p, limit, in_place);
}
#ifdef HAVE_AVX2_PATH
__attribute__((target("avx2")))
static int read_events_avx2(Scan *s, const char *p, const char *limit, int in_place) {
    return read_events_with(event_avx2, line_avx2, s, p, limit, in_place);
}
#endif
#ifdef HAVE_AVX512_PATH
__attribute__((target("avx2,avx512bw")))
static int read_events_avx512(Scan *s, const char *p, const char *limit, int in_place) {
    return read_events_with(event_avx2, line_avx512, s, p, limit, in_place);
}
#endif
static ReadFn read_events = read_events_portable;  /* the CPU's own, chosen at module load */

/* The usual body, read in place: every chunk holds whole events (a server's write of one or
 * more events). 1 read, 0 to decline, 2 to read the de-chunked copy instead. */
static int read_in_place(Scan *s) {
    Py_ssize_t pos = 0, data = 0, size = 0;
    for (;;) {
        int chunk = next_chunk(s, &pos, &data, &size);
        if (chunk != 1) return chunk == 2 && s->done;
        int read = read_events(s, s->raw + data, s->raw + data + size, 1);
        if (read != 1) return read;
    }
}

/* The chunks' data copied into s->body (2 bytes of slack past its end, which the event
 * search reads), each chunk's place in both; 1, 0 to decline, -1 on a memory error. */
static int dechunk(Scan *s) {
    Py_ssize_t pos = 0, data = 0, size = 0, cap = s->raw_len / 5 + 2;
    s->body = malloc(s->raw_len + 2);
    s->seg_body = malloc(sizeof(Py_ssize_t) * cap);
    s->seg_raw = malloc(sizeof(Py_ssize_t) * cap);
    if (!s->body || !s->seg_body || !s->seg_raw) { PyErr_NoMemory(); return -1; }
    for (;;) {
        int chunk = next_chunk(s, &pos, &data, &size);
        if (chunk != 1) {
            s->body[s->body_len] = s->body[s->body_len + 1] = 0;
            return chunk == 2;
        }
        if (s->nsegs == cap) return 0;  /* cannot happen: each chunk takes >= 6 bytes */
        s->seg_body[s->nsegs] = s->body_len;
        s->seg_raw[s->nsegs] = data;
        s->nsegs++;
        memcpy(s->body + s->body_len, s->raw + data, size);
        s->body_len += size;
    }
}

/* What the in-place read found, forgotten before the de-chunked copy is read. */
static void restart(Scan *s) {
    s->ntokens = s->nevents = 0;
    s->done = 0;
    s->first_token = 1;
    s->read = 0;
}

static int read_copy(Scan *s) {
    int ok = dechunk(s);
    if (ok == 1) ok = read_events(s, s->body, s->body + s->body_len, 0);
    return ok == 1 ? s->done : ok;
}

/* The de-chunked body from the start of its last three events to its end (events fill it). */
static PyObject *tail_of(const Scan *s) {
    Py_ssize_t first = s->nevents > 3 ? s->nevents - 3 : 0, len = 0;
    for (Py_ssize_t i = first; i < s->nevents; i++) len += s->ev_end[i % 3] - s->ev_start[i % 3];
    PyObject *tail = PyBytes_FromStringAndSize(NULL, len);
    if (tail == NULL) return NULL;
    char *out = PyBytes_AS_STRING(tail);
    for (Py_ssize_t i = first; i < s->nevents; i++) {
        memcpy(out, s->ev_start[i % 3], s->ev_end[i % 3] - s->ev_start[i % 3]);
        out += s->ev_end[i % 3] - s->ev_start[i % 3];
    }
    return tail;
}

static PyObject *scan_stream(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    Py_ssize_t skip = 0;
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "scan_stream(reads, skip=0)");
        return NULL;
    }
    if (nargs == 2) {
        skip = PyLong_AsSsize_t(args[1]);
        if (skip == -1 && PyErr_Occurred()) return NULL;
        if (skip < 0) {
            PyErr_SetString(PyExc_ValueError, "scan_stream: skip must not be negative");
            return NULL;
        }
    }
    Scan s;
    memset(&s, 0, sizeof(s));
    s.first_token = 1;
    int ok = join_reads(&s, args[0], skip);
    if (ok == 1)
        ok = s.raw_len >= (Py_ssize_t)END_LEN
             && memcmp(s.raw + s.raw_len - END_LEN, END, END_LEN) == 0;
    if (ok == 1) {
        for (Py_ssize_t at = 0; at < s.raw_len; at += 64) __builtin_prefetch(s.raw + at);
        s.tokens = malloc(sizeof(PyObject *) * (s.raw_len / 8 + 1));
        ok = s.tokens ? read_in_place(&s) : (PyErr_NoMemory(), -1);
        if (ok == 2) {
            restart(&s);
            ok = read_copy(&s);
        }
    }
    PyObject *result = NULL;
    if (ok == 1) {
        PyObject *times = PyList_New(s.ntokens);
        PyObject *tail = times ? tail_of(&s) : NULL;
        if (times && tail) {
            for (Py_ssize_t i = 0; i < s.ntokens; i++) {
                Py_INCREF(s.tokens[i]);
                PyList_SET_ITEM(times, i, s.tokens[i]);
            }
            result = PyTuple_Pack(2, times, tail);
        }
        Py_XDECREF(times);
        Py_XDECREF(tail);
    } else if (ok == 0) {
        result = Py_NewRef(Py_None);
    }
    scan_free(&s);
    return result;
}

/* The gaps of one request's token times, in ms, with their float64 sums and extremes. */
typedef struct {
    float *gaps;
    Py_ssize_t n;
    double total, total_sq, lo, hi;
} GapSums;

/* One more gap, from token time `prev` to `now`: the int64 difference as numpy takes it
 * (wrapping past the range, not undefined) over 1e6 in double, stored as float32. The one
 * arithmetic of GapStore.add_times and json_gaps (tests hold the two bit for bit equal). */
static inline void add_gap(GapSums *g, long long prev, long long now) {
    unsigned long long diff = (unsigned long long)now - (unsigned long long)prev;
    double gap = (double)(long long)diff / 1e6;
    g->gaps[g->n] = (float)gap;
    g->total += gap;
    g->total_sq += gap * gap;
    if (g->n == 0 || gap < g->lo) g->lo = gap;
    if (g->n == 0 || gap > g->hi) g->hi = gap;
    g->n++;
}

/* `run` zero gaps, as add_gap(g, t, t) adds each. */
static void add_zero_gaps(GapSums *g, Py_ssize_t run) {
    memset(g->gaps + g->n, 0, sizeof(float) * (size_t)run);
    if (g->n == 0 || 0.0 < g->lo) g->lo = 0.0;
    if (g->n == 0 || 0.0 > g->hi) g->hi = 0.0;
    g->n += run;
}

/* The gaps of token times (a list of at least two ints, ns) into sums->gaps: -1 with an
 * error set where an item is not an int of 64 bits. The tokens of one read share its time
 * object (scan_stream), so an item that is the one before is not converted again; and
 * PyLong_AsLongLongAndOverflow, not PyLong_AsLongLong (~31 ns a 19-digit int in CPython 3.11,
 * its byte-array path; ~20 here): 10.7 -> 7.8 us a record of 256 reads. A run of such items
 * is a run of zero gaps, added at once (1.0 -> 0.3 us a record of one read). */
static int times_gaps(PyObject *times, GapSums *sums) {
    Py_ssize_t n = PyList_GET_SIZE(times);
    PyObject *last = PyList_GET_ITEM(times, 0);
    int overflow = 0;
    long long prev = PyLong_AsLongLongAndOverflow(last, &overflow), now = prev;
    for (Py_ssize_t i = 1; i < n && !overflow && !PyErr_Occurred(); i++) {
        PyObject *item = PyList_GET_ITEM(times, i);
        if (item == last) {
            /* a run of tokens of one read: zero gaps, what add_gap gives each (a sum plus
             * +0.0 is the sum) without its division per gap */
            Py_ssize_t run = 1;
            while (i + run < n && PyList_GET_ITEM(times, i + run) == last) run++;
            add_zero_gaps(sums, run);
            i += run - 1;
            continue;
        }
        if (item != last) {
            now = PyLong_AsLongLongAndOverflow(item, &overflow);
            last = item;
        }
        add_gap(sums, prev, now);
        prev = now;
    }
    if (overflow) PyErr_SetString(PyExc_OverflowError, "a token time past 64 bits");
    return PyErr_Occurred() ? -1 : 0;
}

/* GapStore(cap): a run's ITL gaps (latscope.itlpool.ItlPool). Every gap added is counted in
 * float64 sums and extremes (count, total, total_sq, lo, hi); the float32 values of those not
 * yet folded into the histogram are kept, up to `cap` of them (`kept`), and handed over by
 * values() when full. add_times took ~2.8 us a request at the client's ceiling as a gaps tuple and
 * Python around it (a bytes object, a tuple, its unpacking, array.frombytes): one call now. */
typedef struct {
    PyObject_HEAD
    float *values;
    Py_ssize_t kept, alloc, cap;
    Py_ssize_t count;
    double total, total_sq, lo, hi;
} GapStore;

/* room for `more` values past those kept: 0 where they would pass the cap */
static int store_room(GapStore *self, Py_ssize_t more) {
    Py_ssize_t need = self->kept + more;
    if (more > self->cap - self->kept) return 0;
    if (need > self->alloc) {
        Py_ssize_t size = self->alloc ? self->alloc : 1024;
        while (size < need) size *= 2;
        if (size > self->cap) size = self->cap;
        float *grown = realloc(self->values, sizeof(float) * (size_t)size);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->values = grown;
        self->alloc = size;
    }
    return 1;
}

/* sums of `n` more gaps (written past `kept`, or folded by the caller) into the store's; no
 * gaps (n = 0, lo = inf, hi = -inf) change nothing, and sums with a count of 0 are a merge's
 * (GapStore.add_sums: a worker's sums, its values added before) */
static void store_count(GapStore *self, Py_ssize_t n, double total, double total_sq,
                        double lo, double hi) {
    self->count += n;
    self->total += total;  /* request by request, in ItlPool's order before (bit for bit) */
    self->total_sq += total_sq;
    if (lo < self->lo) self->lo = lo;
    if (hi > self->hi) self->hi = hi;
}

static int GapStore_init(GapStore *self, PyObject *args, PyObject *kwds) {
    Py_ssize_t cap;
    static char *names[] = {"cap", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n", names, &cap)) return -1;
    if (cap < 0) {
        PyErr_SetString(PyExc_ValueError, "GapStore: cap must be >= 0");
        return -1;
    }
    free(self->values);
    self->values = NULL;
    self->kept = self->alloc = self->count = 0;
    self->cap = cap;
    self->total = self->total_sq = 0.0;
    self->lo = Py_HUGE_VAL;
    self->hi = -Py_HUGE_VAL;
    return 0;
}

static void GapStore_dealloc(GapStore *self) {
    free(self->values);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* add_times(times) -> bool: the gaps of one request's token times (a list of ints, ns), as
 * add_gap computes them; False, adding nothing, where they would pass the cap. */
static PyObject *GapStore_add_times(GapStore *self, PyObject *times) {
    if (!PyList_Check(times)) {
        PyErr_SetString(PyExc_TypeError, "add_times takes a list of ints");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(times);
    if (n < 2) Py_RETURN_TRUE;
    int room = store_room(self, n - 1);
    if (room <= 0) return room < 0 ? NULL : Py_NewRef(Py_False);
    GapSums sums = {self->values + self->kept, 0, 0.0, 0.0, 0.0, 0.0};
    if (times_gaps(times, &sums) < 0) return NULL;  /* nothing counted: kept is unchanged */
    self->kept += sums.n;
    store_count(self, sums.n, sums.total, sums.total_sq, sums.lo, sums.hi);
    Py_RETURN_TRUE;
}

/* add_gaps((float32 bytes, total, total_sq, lo, hi)) -> bool: gaps as json_gaps or twins.gap_sums
 * gives them; False, adding nothing, where they would pass the cap. */
static PyObject *GapStore_add_gaps(GapStore *self, PyObject *gaps) {
    PyObject *f32;
    double total, total_sq, lo, hi;
    if (!PyTuple_Check(gaps)) {
        PyErr_SetString(PyExc_TypeError, "add_gaps takes a tuple (bytes, 4 floats)");
        return NULL;
    }
    if (!PyArg_ParseTuple(gaps, "Sdddd", &f32, &total, &total_sq, &lo, &hi)) return NULL;
    Py_ssize_t n = PyBytes_GET_SIZE(f32) / (Py_ssize_t)sizeof(float);
    if (PyBytes_GET_SIZE(f32) % (Py_ssize_t)sizeof(float)) {
        PyErr_SetString(PyExc_ValueError, "add_gaps: not float32 values");
        return NULL;
    }
    int room = store_room(self, n);
    if (room <= 0) return room < 0 ? NULL : Py_NewRef(Py_False);
    if (n) memcpy(self->values + self->kept, PyBytes_AS_STRING(f32), sizeof(float) * (size_t)n);
    self->kept += n;
    store_count(self, n, total, total_sq, lo, hi);
    Py_RETURN_TRUE;
}

/* add_sums(count, total, total_sq, lo, hi): gaps counted whose values were folded elsewhere */
static PyObject *GapStore_add_sums(GapStore *self, PyObject *args) {
    Py_ssize_t n;
    double total, total_sq, lo, hi;
    if (!PyArg_ParseTuple(args, "ndddd", &n, &total, &total_sq, &lo, &hi)) return NULL;
    store_count(self, n, total, total_sq, lo, hi);
    Py_RETURN_NONE;
}

/* values() -> bytes: the float32 values kept, in the order added */
static PyObject *GapStore_values(GapStore *self, PyObject *unused) {
    (void)unused;
    return PyBytes_FromStringAndSize(self->values ? (const char *)self->values : "",
                                     self->kept * (Py_ssize_t)sizeof(float));
}

/* clear(): the values kept dropped (folded by the caller); the sums stay */
static PyObject *GapStore_clear(GapStore *self, PyObject *unused) {
    (void)unused;
    self->kept = 0;
    Py_RETURN_NONE;
}

static PyObject *GapStore_nbytes(GapStore *self, void *closure) {
    (void)closure;
    return PyLong_FromSsize_t(self->alloc * (Py_ssize_t)sizeof(float));
}

static PyMethodDef GapStore_methods[] = {
    {"add_times", (PyCFunction)GapStore_add_times, METH_O,
     "add_times(times) -> bool: one request's gaps from its token times (ns); False, adding "
     "nothing, where they would pass the cap."},
    {"add_gaps", (PyCFunction)GapStore_add_gaps, METH_O,
     "add_gaps((f32 bytes, total, total_sq, lo, hi)) -> bool: gaps as json_gaps gives them; "
     "False, adding nothing, where they would pass the cap."},
    {"add_sums", (PyCFunction)GapStore_add_sums, METH_VARARGS,
     "add_sums(count, total, total_sq, lo, hi): gaps counted, their values folded elsewhere."},
    {"values", (PyCFunction)GapStore_values, METH_NOARGS,
     "values() -> bytes: the float32 values kept."},
    {"clear", (PyCFunction)GapStore_clear, METH_NOARGS,
     "clear(): drop the values kept (the sums stay)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef GapStore_members[] = {
    {"cap", T_PYSSIZET, offsetof(GapStore, cap), READONLY, "values kept at most"},
    {"kept", T_PYSSIZET, offsetof(GapStore, kept), READONLY, "values kept now"},
    {"count", T_PYSSIZET, offsetof(GapStore, count), READONLY, "gaps counted"},
    {"total", T_DOUBLE, offsetof(GapStore, total), READONLY, "their sum (ms)"},
    {"total_sq", T_DOUBLE, offsetof(GapStore, total_sq), READONLY, "sum of squares"},
    {"lo", T_DOUBLE, offsetof(GapStore, lo), READONLY, "smallest (inf: none)"},
    {"hi", T_DOUBLE, offsetof(GapStore, hi), READONLY, "largest (-inf: none)"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef GapStore_getset[] = {
    {"nbytes", (getter)GapStore_nbytes, NULL, "bytes held for values", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject GapStoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "latscope._native.GapStore",
    .tp_doc = "GapStore(cap): a run's ITL gaps: sums of all, float32 values of up to cap.",
    .tp_basicsize = sizeof(GapStore),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)GapStore_init,
    .tp_dealloc = (destructor)GapStore_dealloc,
    .tp_methods = GapStore_methods,
    .tp_members = GapStore_members,
    .tp_getset = GapStore_getset,
};

/* value's decimal digits (and sign), as printf's %lld writes them (snprintf took ~70 ns an
 * int), right-aligned at the end of text[INT_TEXT]; returns where they start. Where `last`
 * (> 0) is the value whose digits text holds from `start`, and value > 0 too, only the digits
 * that differ are written: a request's token times share their leading digits (13-16 digits,
 * of which a gap of a few ms changes ~7), and writing each whole was most of a line's cost
 * where every token came in a read of its own. */
#define INT_TEXT 24
static const char PAIRS[] =  /* "00".."99": two digits a division */
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

static int int_text(long long value, char *text, long long last, int start) {
    int at = INT_TEXT;
    if (value > 0 && last > 0) {
        unsigned long long v = (unsigned long long)value, was = (unsigned long long)last;
        while (v != was) {
            if (v == 0) return at;  /* value has fewer digits than last */
            if (v < 10) {
                text[--at] = (char)('0' + v);
                v = 0;
                was /= 10;
            } else {
                unsigned pair = (unsigned)(v % 100) * 2;
                text[--at] = PAIRS[pair + 1];
                text[--at] = PAIRS[pair];
                v /= 100;
                was /= 100;
            }
        }
        return v == 0 ? at : start;  /* the digits above `at` equal last's: already there */
    }
    unsigned long long v = value < 0 ? 0ULL - (unsigned long long)value : (unsigned long long)value;
    for (; v >= 10; v /= 100) {
        unsigned pair = (unsigned)(v % 100) * 2;
        text[--at] = PAIRS[pair + 1];
        text[--at] = PAIRS[pair];
        if (v < 100) {  /* its two digits were the last */
            v = 0;
            break;
        }
    }
    if (v) text[--at] = (char)('0' + v);
    if (value == 0) text[--at] = '0';
    if (value < 0) text[--at] = '-';
    return at;
}

/* A growing text buffer for record_line. */
typedef struct {
    char *text;
    Py_ssize_t len, cap;
} Text;

static int text_room(Text *t, Py_ssize_t more) {
    if (t->len + more <= t->cap) return 1;
    Py_ssize_t cap = (t->cap + more) * 2;
    char *grown = realloc(t->text, (size_t)cap);
    if (grown == NULL) { PyErr_NoMemory(); return -1; }
    t->text = grown;
    t->cap = cap;
    return 1;
}

static inline void text_add(Text *t, const char *bytes, Py_ssize_t n) {  /* room made before */
    memcpy(t->text + t->len, bytes, (size_t)n);
    t->len += n;
}

/* An exact int of 64 bits into value: 1, or 0 for anything else (no exception left set). */
static int int64_of(PyObject *item, long long *value) {
    if (!PyLong_CheckExact(item)) return 0;
    int overflow = 0;
    *value = PyLong_AsLongLongAndOverflow(item, &overflow);
    if (overflow || (*value == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* A list of ints as JSON text, as orjson writes it: 1, 0 where an item is not an exact int of
 * 64 bits (or, as gaps, a difference past 64 bits), -1 on a memory error. `as_gaps`: the
 * first item as it is, then each item's difference from the one before (a record's token
 * times, written as chunk_gaps_ns). The token times of one read share one time object
 * (scan_stream), so an item that is the one before is written by copying its digits, or as
 * a gap of 0. */
static int add_ints(Text *t, PyObject *ints, int as_gaps) {
    Py_ssize_t n = PyList_GET_SIZE(ints);
    /* 20 digits and a sign at most per item, a comma each, the brackets */
    if (text_room(t, n * 22 + 2) < 0) return -1;
    t->text[t->len++] = '[';
    PyObject *last = NULL;
    long long last_value = 0;  /* 0: none (int_text writes every digit) */
    char digits[INT_TEXT];
    int start = INT_TEXT;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(ints, i);
        if (i) t->text[t->len++] = ',';
        if (item == last && as_gaps) {
            t->text[t->len++] = '0';
            continue;
        }
        if (item != last) {
            long long value, gap;
            if (!int64_of(item, &value)) return 0;
            if (as_gaps && last != NULL) {
                if (__builtin_sub_overflow(value, last_value, &gap)) return 0;
                start = int_text(gap, digits, 0, INT_TEXT);
            } else if (last == NULL || value != last_value) {  /* equal: records read back */
                start = int_text(value, digits, as_gaps ? 0 : last_value, start);
            }
            last = item;
            last_value = value;
        }
        text_add(t, digits + start, INT_TEXT - start);
    }
    t->text[t->len++] = ']';
    return 1;
}

/* A str as orjson writes it, where nothing in it needs an escape (a quote, a backslash, a
 * control character): 1, else 0 (the caller lets orjson write the line), -1 on memory. Other
 * characters are written as their UTF-8, as orjson writes them. */
static int add_str(Text *t, PyObject *str) {
    Py_ssize_t n;
    const char *utf8 = PyUnicode_AsUTF8AndSize(str, &n);
    if (utf8 == NULL) {  /* a lone surrogate: orjson refuses it, and says so */
        PyErr_Clear();
        return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)utf8[i];
        if (c < 0x20 || c == '"' || c == '\\') return 0;
    }
    if (text_room(t, n + 2) < 0) return -1;
    t->text[t->len++] = '"';
    text_add(t, utf8, n);
    t->text[t->len++] = '"';
    return 1;
}

/* One field's value (a list of ints written as gaps where `as_gaps`): 1, 0 to decline, -1 on
 * memory. */
static int add_value(Text *t, PyObject *value, int as_gaps) {
    if (as_gaps && !PyList_CheckExact(value)) return 0;
    if (value == Py_None || value == Py_True || value == Py_False) {
        const char *word = value == Py_None ? "null" : value == Py_True ? "true" : "false";
        Py_ssize_t n = (Py_ssize_t)strlen(word);
        if (text_room(t, n) < 0) return -1;
        text_add(t, word, n);
        return 1;
    }
    if (PyLong_CheckExact(value)) {
        long long v;
        if (!int64_of(value, &v)) return 0;
        char digits[INT_TEXT];
        int start = int_text(v, digits, 0, INT_TEXT);
        if (text_room(t, INT_TEXT - start) < 0) return -1;
        text_add(t, digits + start, INT_TEXT - start);
        return 1;
    }
    if (PyUnicode_CheckExact(value)) return add_str(t, value);
    if (PyList_CheckExact(value)) return add_ints(t, value, as_gaps);
    if (PyDict_CheckExact(value) && PyDict_GET_SIZE(value) == 0) {
        if (text_room(t, 2) < 0) return -1;
        text_add(t, "{}", 2);
        return 1;
    }
    return 0;
}

/* record_line(keys, values, gaps_at=-1) -> bytes | None
 * A requests.jsonl line, "{...}\n", of a record whose fields are `values` (a tuple, in its
 * dataclass's field order), named by `keys` (a tuple of str, as long), the list of ints at
 * `gaps_at` written as gaps (its first item, then each one's difference from the one before:
 * a record's token times): byte for byte what orjson.dumps writes for the dict of those keys
 * and values, that list replaced by its gaps (latscope.rundir.record_line's own path); None
 * where a value is anything but the usual (an exact int of 64 bits, None, a bool, a str with
 * nothing to escape, a list of such ints, an empty dict), and the caller lets orjson write the
 * line. For the line of every request at the client's ceiling: orjson's dataclass path took
 * ~4.6 us of a response there (benchmarks/client_ceiling.py, a 9-field line in its place:
 * 0.87 -> 1.02 of the floor). */
static PyObject *record_line(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    Py_ssize_t gaps_at = -1;
    if (nargs < 2 || nargs > 3 || !PyTuple_Check(args[0]) || !PyTuple_Check(args[1])
        || PyTuple_GET_SIZE(args[0]) != PyTuple_GET_SIZE(args[1])
        || (nargs == 3 && (gaps_at = PyLong_AsSsize_t(args[2])) == -1 && PyErr_Occurred())) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError,
                            "record_line(keys, values, gaps_at=-1): two tuples as long");
        return NULL;
    }
    PyObject *keys = args[0], *values = args[1];
    Text t = {NULL, 0, 0};
    int ok = text_room(&t, 512);
    if (ok == 1) t.text[t.len++] = '{';
    for (Py_ssize_t i = 0; ok == 1 && i < PyTuple_GET_SIZE(keys); i++) {
        PyObject *key = PyTuple_GET_ITEM(keys, i);
        if (!PyUnicode_CheckExact(key)) {
            ok = 0;
            break;
        }
        if (i && (ok = text_room(&t, 1)) == 1) t.text[t.len++] = ',';
        if (ok == 1) ok = add_str(&t, key);
        if (ok == 1 && (ok = text_room(&t, 1)) == 1) t.text[t.len++] = ':';
        if (ok == 1) ok = add_value(&t, PyTuple_GET_ITEM(values, i), i == gaps_at);
    }
    if (ok == 1 && (ok = text_room(&t, 2)) == 1) text_add(&t, "}\n", 2);
    PyObject *result = ok == 1 ? PyBytes_FromStringAndSize(t.text, t.len)
                               : ok == 0 ? Py_NewRef(Py_None) : NULL;
    free(t.text);
    return result;
}

/* json_gaps(data, start=0, end=len) -> (start, end, gaps) | None
 * A requests.jsonl line's token times (the line: data[start:end]) read where they lie, for the
 * passes that read a run back (latscope.rundir.record_without_times): the text between the '['
 * and ']' of its "chunk_gaps_ns" array (the first time, then each one's gap from the one
 * before: record_line's) is data[start:end], and gaps is what add_times takes from those times
 * (None for fewer than two). None where the line holds no such array or it is not a plain
 * JSON list of 64-bit ints (the caller decodes the line whole). Decoding the array made a
 * Python int of each time (~40 ns each, ~10 us of a 256-token record's ~31), to take their
 * differences. */
static PyObject *json_gaps(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    Py_ssize_t from = 0, to = -1;
    if (nargs < 1 || nargs > 3 || !PyBytes_Check(args[0])
            || (nargs > 1 && (from = PyLong_AsSsize_t(args[1])) == -1 && PyErr_Occurred())
            || (nargs > 2 && (to = PyLong_AsSsize_t(args[2])) == -1 && PyErr_Occurred())) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "json_gaps(data: bytes, start=0, end=len)");
        return NULL;
    }
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    if (to < 0 || to > size) to = size;
    if (from < 0 || from > to) {
        PyErr_SetString(PyExc_ValueError, "json_gaps: start outside the data");
        return NULL;
    }
    static const char KEY[] = "\"chunk_gaps_ns\":[";
    const char *text = PyBytes_AS_STRING(args[0]), *stop = text + to;
    const char *at = memmem(text + from, stop - (text + from), KEY, sizeof(KEY) - 1);
    if (at == NULL) Py_RETURN_NONE;
    const char *start = at + sizeof(KEY) - 1, *p = start;
    const char *end = memchr(start, ']', stop - start);
    if (end == NULL) Py_RETURN_NONE;
    Py_ssize_t count = 0, cap = (end - start) / 2 + 1;
    GapSums sums = {malloc(sizeof(float) * (size_t)cap), 0, 0.0, 0.0, 0.0, 0.0};
    if (sums.gaps == NULL) return PyErr_NoMemory();
    long long prev = 0;
    int ok = 1;
    while (ok && p < end) {  /* -?digits, then ',' or the end */
        int negative = *p == '-';
        const char *digits = p + negative, *q = digits;
        long long value = 0, now = 0;
        for (; q < end && (unsigned char)(*q - '0') < 10; q++) {}
        /* up to 18 digits (a longer int, rare, is decoded whole by the caller), JSON's */
        ok = q > digits && q - digits <= 18 && (q == end || *q == ',')
             && !(q - digits > 1 && *digits == '0') && !(q < end && q + 1 == end);
        for (const char *d = digits; ok && d < q; d++) value = value * 10 + (*d - '0');
        if (negative) value = -value;
        if (count == 0) {
            now = value;
        } else if (ok && !__builtin_add_overflow(prev, value, &now)) {
            add_gap(&sums, prev, now);
        } else {
            ok = 0;
        }
        prev = now;
        count++;
        p = q < end ? q + 1 : q;
    }
    PyObject *result = NULL;
    if (!ok) {
        result = Py_NewRef(Py_None);
    } else if (count < 2) {
        result = Py_BuildValue("(nnO)", start - text, end - text, Py_None);
    } else {
        PyObject *f32 = PyBytes_FromStringAndSize((const char *)sums.gaps,
                                                  sums.n * (Py_ssize_t)sizeof(float));
        if (f32 != NULL)
            result = Py_BuildValue("(nn(Ndddd))", start - text, end - text, f32, sums.total,
                                   sums.total_sq, sums.lo, sums.hi);
    }
    free(sums.gaps);
    return result;
}

static PyMethodDef methods[] = {
    {"scan_stream", (PyCFunction)(void (*)(void))scan_stream, METH_FASTCALL,
     "scan_stream(reads, skip=0) -> (token_times, tail) | None: a finished chunked SSE body "
     "(past skip bytes of the first read) read in one pass, or None where the exact reader must "
     "read it."},
    {"json_gaps", (PyCFunction)(void (*)(void))json_gaps, METH_FASTCALL,
     "json_gaps(data, start=0, end=len) -> (start, end, gaps) | None: the chunk_gaps_ns array of "
     "the requests.jsonl line data[start:end] (data[start:end] between its brackets) and "
     "the ITL gaps of its ints, as GapStore.add_times takes them."},
    {"record_line", (PyCFunction)(void (*)(void))record_line, METH_FASTCALL,
     "record_line(keys, values, gaps_at=-1) -> bytes | None: a record's requests.jsonl line as "
     "orjson writes it, from its fields' names and values, the list at gaps_at as gaps; None "
     "for values it leaves to orjson."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "latscope._native",
    "latscope's optional C part: the stream pass, the ITL gaps and a record's token "
    "times as JSON (see _native.c).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
#if defined(__SSE2__) && !defined(LATSCOPE_NO_SIMD)
    search_path = "sse2";
#endif
#ifdef HAVE_AVX2_PATH
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) {
        read_events = read_events_avx2;
        search_path = "avx2";
    }
#endif
#ifdef HAVE_AVX512_PATH
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512bw")) {
        read_events = read_events_avx512;
        search_path = "avx512bw";
    }
#endif
    if (PyType_Ready(&GapStoreType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddObjectRef(m, "GapStore", (PyObject *)&GapStoreType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    /* which key search this CPU runs (tests hold every path to the same answers) */
    if (m != NULL && PyModule_AddStringConstant(m, "KEY_SEARCH", search_path) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
