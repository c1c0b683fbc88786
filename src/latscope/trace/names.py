"""Display names for GPU kernels and CPU events: the one shortening rule every renderer uses.

Kernel names are C++ signatures of up to ~2,000 characters (template arguments, lambdas,
parameter lists). ``short_kernel_name`` keeps what says what a kernel *is* -- the function, and the
functor or kernel class it was instantiated for (``cutlass::device_kernel<FlashAttnFwdSm90…>``)
-- and elides the rest; the full name stays in the JSON. Ellipsis in the middle is the last
resort. ``short_kernel_names`` does the same for a whole table and then keeps rows apart whose
long names differ. Which template arguments only carry others (``std::array``, ``cute::…``) and
never say what a kernel is comes from ``taxonomy.toml`` (``[names] carriers``), as the
categories do.

The terminal (``latscope.report.trace``), report.md and the trace findings all shorten through
here, so one kernel reads the same everywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

from latscope.trace.taxonomy import load_taxonomy

ELLIPSIS = "…"


def ellipsize(text: str, width: int, *, keep_tail: float = 0.5) -> str:
    """``text`` cut to ``width`` characters by an ellipsis inside it (``keep_tail`` of the room
    goes to the end, which is where names usually differ)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    tail = int((width - 1) * keep_tail)
    head = width - 1 - tail
    return text[:head] + ELLIPSIS + (text[len(text) - tail:] if tail else "")


def _ellipsize_around(text: str, pos: int, width: int) -> str:
    """``text`` cut to ``width`` keeping its start and the stretch from ``pos`` on (where it
    differs from a name it would otherwise collide with)."""
    if len(text) <= width:
        return text
    head = max(1, width // 3)
    rest = width - head - 1
    start = max(head, min(pos - 4, len(text) - rest))
    if start <= head:
        return ellipsize(text, width)
    window = text[start:start + rest]
    if start + rest < len(text):
        window = window[:-1] + ELLIPSIS
    return text[:head] + ELLIPSIS + window


# --- C++ names -------------------------------------------------------------------------------

_OPEN = {"<": ">", "(": ")", "[": "]", "{": "}"}
_SCALAR = re.compile(
    r"^(?:-?\d+[ulUL]*|true|false|\(.*\)-?\d+"  # numbers, bools, enum casts: (ns::Mode)1
    r"|(?:(?:un)?signed |const |volatile )*(?:char|short|int|long|long long|float|double|bool|void"
    r"|size_t|u?int\d+_t)"
    r"|(?:[\w:]*::)?_*(?:nv_|hip_)?(?:bfloat|BFloat|bf16|half|Half|float\d|Float\d|fp8|fp4|e4m3"
    r"|e5m2|tfloat32)\w*)"
    r"(?:\s*(?:const|\*|&))*$")
_QUALIFIERS = re.compile(r"(?:\s*(?:\bconst\b|\bvolatile\b|\*|&))+$")
_CLONE = re.compile(r"\s*\[clone [^\]]*\]$")


@dataclass
class _Node:
    """One C++ entity of a signature: its qualified name and the template arguments it got."""

    qual: str
    args: list[str] | None = None  # None: not a template
    plain: bool = False  # not C++ at all (a C, Triton or cuBLASLt name): shown as is

    @property
    def last(self) -> str:
        return self.qual.rsplit("::", 1)[-1]


@dataclass
class _Groups:
    """Text split at depth 0: literal runs and bracketed groups (kind = opening char)."""

    parts: list[tuple[str, str]] = field(default_factory=list)  # (kind, text); kind "" = literal


def _split(text: str) -> _Groups:
    out = _Groups()
    stack: list[str] = []
    start = 0
    literal_from = 0
    for i, ch in enumerate(text):
        if ch in _OPEN and (ch != "<" or _angle_opens(text, i, stack)):
            if not stack:
                if i > literal_from:
                    out.parts.append(("", text[literal_from:i]))
                start = i
            stack.append(ch)
        elif stack and ch == _OPEN[stack[-1]]:
            stack.pop()
            if not stack:
                out.parts.append((text[start], text[start + 1:i]))
                literal_from = i + 1
    if stack:  # unbalanced (a name cut by the profiler): keep the rest as literal text
        out.parts.append(("", text[start:]))
    elif literal_from < len(text):
        out.parts.append(("", text[literal_from:]))
    return out


def _angle_opens(text: str, i: int, stack: list[str]) -> bool:
    """'<' opens template arguments unless it is a comparison inside parentheses or an operator."""
    if stack and stack[-1] == "(":
        return False
    return i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_>:")


def _split_args(inner: str) -> list[str]:
    args, depth, start = [], 0, 0
    stack: list[str] = []
    for i, ch in enumerate(inner):
        if ch in _OPEN and (ch != "<" or _angle_opens(inner, i, stack)):
            stack.append(ch)
        elif stack and ch == _OPEN[stack[-1]]:
            stack.pop()
        elif ch == "," and not stack:
            args.append(inner[start:i].strip())
            start = i + 1
    depth = len(stack)
    tail = inner[start:].strip()
    if tail or args:
        args.append(tail)
    return [a for a in args if a] if depth == 0 else [inner.strip()]


def _parse(text: str) -> _Node:
    """``void ns::(anonymous namespace)::f<A, B<C> >(int)`` -> qual ``ns::f``, args ``[A, B<C>]``."""
    text = _CLONE.sub("", text.strip()).replace("(anonymous namespace)::", "")
    if text.startswith("_Z"):
        text = _demangle_prefix(text) or text
    text = _QUALIFIERS.sub("", text) or text
    parts = _split(text).parts
    # the parameter list: the first (...) directly after a name or a template argument list
    cut = next((i for i, (kind, _) in enumerate(parts)
                if kind == "(" and i > 0 and _ends_name(parts[i - 1])), None)
    head = parts[:cut] if cut is not None else parts
    if cut is None and not any(kind == "<" for kind, _ in head):
        return _Node(text, plain="::" not in text)
    # the entity is the last space-separated word of the head (drops return types)
    word: list[tuple[str, str]] = []
    for kind, value in reversed(head):
        if kind == "" and " " in value.rstrip():
            word.insert(0, (kind, value.rstrip().rsplit(" ", 1)[-1]))
            break
        word.insert(0, (kind, value))
    args = None
    if word and word[-1][0] == "<":
        args = _split_args(word[-1][1])
        word = word[:-1]
    qual = "".join(value if kind == "" else f"{kind}{ELLIPSIS}{_OPEN[kind]}"
                   for kind, value in word).strip()
    if not qual:
        return _Node(text, plain=True)
    return _Node(qual, args)


def _demangle_prefix(name: str) -> str | None:
    """``_ZN5aiter24add_rmsnorm_quant_kernelI...`` -> ``aiter::add_rmsnorm_quant_kernel<…>``.

    Only the (nested) name: ``trace`` demangles fully with c++filt when it can; this covers
    names it could not, and template arguments would be elided here anyway."""
    i = 3 if name.startswith("_ZN") else 2
    while name[i:i + 1] in ("r", "V", "K"):
        i += 1
    parts = []
    while i < len(name) and name[i].isdigit():
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        size = int(name[i:j])
        parts.append(name[j:j + size])
        i = j + size
        if not name.startswith("_ZN"):
            break
    if not parts or not all(parts):
        return None
    return "::".join(parts) + (f"<{ELLIPSIS}>" if name[i:i + 1] == "I" else "")


def _ends_name(part: tuple[str, str]) -> bool:
    kind, value = part
    return kind == "<" or (kind == "" and bool(value) and (value[-1].isalnum() or value[-1] == "_"))


def _is_scalar(arg: str) -> bool:
    return bool(_SCALAR.match(arg.strip()))


def _arg_brief(arg: str) -> str:
    """One template argument, short: ``c10::BFloat16`` -> ``BFloat16``, ``ns::F<int>`` ->
    ``F<…>``, a lambda inside ``f(...)::{lambda()#1}`` -> ``f``."""
    if _is_scalar(arg):
        return re.sub(r"(?:[\w]+::)+", "", arg.strip())
    node = _parse(arg)
    if node.plain:
        return arg.strip()
    return node.last + ("<…>" if node.args else "")


def _informative(node: _Node) -> _Node | None:
    """The first template argument that names a thing (a functor, a kernel class), not a number
    or a dtype: for wrappers such as ``cutlass::device_kernel<K>`` it is what the kernel is."""
    for arg in node.args or ():
        if not _is_scalar(arg):
            inner = _parse(arg)
            if load_taxonomy().carriers.search(inner.qual):
                continue
            if not inner.plain or re.match(r"^[A-Za-z_]\w*$", arg.strip()):
                return inner
    return None


def _chain(node: _Node, depth: int) -> str:
    """``outer<…inner<…leaf…>…>`` following the informative argument ``depth`` levels down."""
    if not node.args:
        return ""
    inner = _informative(node) if depth > 0 else None
    if inner is None:
        return f"<{ELLIPSIS}>"
    index = next(i for i, a in enumerate(node.args) if _parse(a).qual == inner.qual)
    before = ELLIPSIS if index > 0 else ""
    after = ELLIPSIS if index < len(node.args) - 1 else ""
    deeper = _chain(inner, depth - 1)
    if deeper == f"<{ELLIPSIS}>":
        deeper = ELLIPSIS  # leaf: "F…" says "F, with arguments"
    text = f"{before}{inner.last}{deeper}{after}".replace(ELLIPSIS * 2, ELLIPSIS)
    return f"<{text}>"


def _leaf(node: _Node, depth: int) -> str | None:
    """``outer<…leaf…>``: the informative argument ``depth`` levels down, the levels between
    left out (``elementwise_kernel<…direct_copy_kernel_cuda…>``); None if the chain is shorter."""
    inner: _Node | None = node
    for _ in range(depth):
        inner = _informative(inner) if inner is not None else None
    if inner is None:
        return None
    return f"<{ELLIPSIS}{inner.last}{ELLIPSIS}>"


def _deep(node: _Node, depth: int = 4) -> str:
    """Every template argument, namespaces dropped, nested ``depth`` levels: the long form that
    still differs wherever the names differ (cut around the difference when rows collide)."""
    if not node.args:
        return node.last
    if depth == 0:
        return f"{node.last}<{ELLIPSIS}>"
    args = [re.sub(r"(?:\w+::)+", "", a) if _is_scalar(a) else _deep(_parse(a), depth - 1)
            for a in node.args]
    return f"{node.last}<{', '.join(args)}>"


def kernel_name_forms(name: str, *, deep: bool = True) -> list[str]:
    """Shortened forms of one kernel name, most informative first (any of them may be long).
    ``deep`` adds forms that follow template arguments further down (``reduce_kernel<…
    MeanOps…>``): they tell rows apart but can name a detail (``Sm90``) instead of the kernel."""
    node = _parse(name)
    if node.plain:
        return [node.qual]
    quals = [node.qual] if node.last == node.qual else [node.qual, node.last]
    if node.args is None:
        return quals
    brief = "<" + ", ".join(_arg_brief(a) for a in node.args) + ">"
    forms = [q + brief for q in quals]
    forms += [q + _chain(node, 1) for q in quals]
    if deep:
        forms += [node.last + leaf for depth in (2, 3) if (leaf := _leaf(node, depth))]
        forms += [q + _chain(node, depth) for depth in (2, 3) for q in quals]
    forms += [q + f"<{ELLIPSIS}>" for q in quals]
    return list(dict.fromkeys(forms))


def short_kernel_name(name: str, width: int = 48) -> str:
    """``name`` on one line of at most ``width`` characters, recognisably: the most informative
    form that fits; a form that names what a wrapper kernel wraps is cut in the wrapper's own
    name before that argument is dropped."""
    forms = kernel_name_forms(name, deep=False)
    named = [f for f in forms if _names_argument(f)]
    for form in forms:
        if len(form) <= width:
            if _names_argument(form) or not named:
                return form
            break
    for form in sorted(named, key=lambda f: len(f.partition("<")[2])):
        if squeezed := _squeeze(form, width):
            return squeezed
    fitting = [f for f in forms if len(f) <= width]
    return fitting[0] if fitting else ellipsize(min(forms, key=len), width)


def _names_argument(form: str) -> bool:
    """Whether a form shows a named template argument (not only numbers, dtypes or ``…``)."""
    inner = form.partition("<")[2]
    return bool(re.search(r"[A-Za-z_]{3,}", inner)) and not _is_scalar_list(inner)


def _is_scalar_list(inner: str) -> bool:
    return all(_is_scalar(a) for a in _split_args(inner.rstrip(">")))


def short_kernel_names(names: Sequence[str], width: int = 48) -> list[str]:
    """Short forms for the rows of one table: as ``short_kernel_name``, then rows whose short
    forms collide while their names differ get the most informative form that tells them apart."""
    short = [short_kernel_name(n, width) for n in names]
    for _ in range(2):  # a changed row can collide with a third one; twice settles real tables
        groups: dict[str, list[int]] = {}
        for i, s in enumerate(short):
            groups.setdefault(s, []).append(i)
        clashes = [idx for idx in groups.values() if len({names[i] for i in idx}) > 1]
        if not clashes:
            break
        taken = set(short)
        for idx in clashes:
            for i in idx:
                short[i] = _distinct_form(names[i], [names[j] for j in idx if names[j] != names[i]],
                                          width, taken)
                taken.add(short[i])
    return short


def _distinct_form(name: str, others: list[str], width: int, taken: set[str]) -> str:
    other_forms = {f for o in others for f in kernel_name_forms(o)}
    for form in kernel_name_forms(name):
        if len(form) <= width and form not in other_forms and form not in taken:
            return form
    # then cut the kernel's own name, not the argument that tells the rows apart
    for form in sorted(kernel_name_forms(name), key=lambda f: not f.partition("<")[2].startswith(ELLIPSIS)):
        squeezed = _squeeze(form, width)
        if squeezed and squeezed not in taken and squeezed not in other_forms:
            return squeezed
    mine, theirs = _long_form(name), [_long_form(o) for o in others]
    pos = max((_first_difference(mine, t) for t in theirs if t != mine), default=None)
    if pos is None:  # they differ only in what every short form drops: keep the readable one
        return short_kernel_name(name, width)
    return _ellipsize_around(mine, pos, width)


def _squeeze(form: str, width: int) -> str | None:
    """``outer<…leaf…>`` with the outer name cut so that the arguments shown stay whole
    (``vectorized_el…_kernel<…bfloat16_copy_kernel_cuda…>``); None when that does not fit or
    the form names no argument."""
    outer, bracket, inner = form.partition("<")
    if not bracket or inner == f"{ELLIPSIS}>" or len(form) <= width:
        return None
    outer = outer.rsplit("::", 1)[-1]
    room = width - len(inner) - 1
    return ellipsize(outer, room) + "<" + inner if room >= 10 else None


def _long_form(name: str) -> str:
    node = _parse(name)
    return node.qual if node.plain or node.args is None else _deep(node)


def _first_difference(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


_PY_FRAME = re.compile(r"^(?P<path>[^()]*?)(?P<rest>\(\d+\): .*)$")


def short_event_name(name: str, width: int) -> str:
    """A CPU event on one line: a Python frame keeps its file and function (``…/gpt_oss.py(130):
    forward``), a C++ op is shortened like a kernel."""
    m = _PY_FRAME.match(name)
    if m:
        if len(name) <= width:
            return name
        path, rest = m["path"], m["rest"]
        base = path.rsplit("/", 1)[-1]
        for candidate in (f"{ELLIPSIS}/{base}{rest}", f"{base}{rest}"):
            if len(candidate) <= width:
                # as much of the directory as fits before the file name
                room = width - len(base) - len(rest) - 1
                tail_dirs = path[:len(path) - len(base)][-room:] if room > 0 else ""
                return f"{ELLIPSIS}{tail_dirs}{base}{rest}" if tail_dirs else candidate
        return ellipsize(f"{base}{rest}", width, keep_tail=0.4)
    return short_kernel_name(name, width)
