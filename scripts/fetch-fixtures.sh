#!/usr/bin/env bash
# Download the real trace fixtures the unit tests read (public files from GitHub, at pinned
# commits) and check each against its sha256; or, with --verify, only check a folder you have.
#
#   bash scripts/fetch-fixtures.sh [DIR]         download into DIR/traces (default: ../shared/fixtures)
#   bash scripts/fetch-fixtures.sh --verify DIR  check DIR/traces against the checksums, download nothing
#
# Then run the tests with LATSCOPE_FIXTURES=DIR (not needed for the default DIR). Each file is
# fetched into a temporary name and moved into place only once its checksum matches, so an
# interrupted or corrupted download never leaves a file the tests would read. Checksums are of the
# files as published; the nsys export is published uncompressed and stored gzip'ed here, so its
# checksum is of the decompressed bytes. The vLLM server recordings under vllm/ were made by the
# project (tiny model, CPU build; H200 run) and are not published anywhere: tests that need them
# skip without them.
set -euo pipefail

GH=https://raw.githubusercontent.com
TL=AMD-AGI/TraceLens
# sha256 | local path under traces/ | repository | commit | path in the repository | stored as
MANIFEST=$(cat <<'EOF'
da0a9ffe51da7b5cc0ece37be5708c4c002a2f89e2839bd2bad00ab8d7e6f8c5|amd_mi300x_vllm_gptoss_decode_fullgraph.pt.trace.json.gz|TL|8bb88d0858b4817f6a0f6bb7d6f8a2210ffc80ba|tests/traces/inference/vllm_decode_full/graph_execution.json.gz|raw
4eff6c90583855d67a12a06aa5edfd281a745bba4be4462a41bd4cacf6dea702|amd_mi300x_vllm_gptoss_prefilldecode_piecewise.pt.trace.json.gz|TL|8bb88d0858b4817f6a0f6bb7d6f8a2210ffc80ba|tests/traces/inference/vllm_prefilldecode_piecewise/graph_execution.json.gz|raw
6bafad1e64aa49e71793cb45fb3ab84fa93f9f018c51b18a86508e7ea6de350e|amd_mi300x_sglang_qwen3-8b_decode.pt.trace.json.gz|TL|8bb88d0858b4817f6a0f6bb7d6f8a2210ffc80ba|tests/traces/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz|raw
1bfbe813843070fcf629db2d67afbcabafe4e0a61bd1d30157b58a171f0664ac|amd_mi300x_hf_qwen1.5-0.5b.pt.trace.json.gz|TL|674f387829d98078b470bce9cea812907e14f4ee|tests/traces/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz|raw
7c4a4b817b79db0aa90f0df0368de88ac6f6e22261864b68fa88d0a3f9c5c63d|nvidia_h100_hf_qwen1.5-0.5b.pt.trace.json.gz|TL|674f387829d98078b470bce9cea812907e14f4ee|tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz|raw
7f5e9c9dc4ba71371fde1d947204134575b05d7a614986f249fa8142663c7ca2|nvidia_b200_vllm_eager_tp8.pt.trace.json.gz|TL|4c20ff104877712c0ee94f8abe968ea6d5a47ec2|tests/traces/b200/eager_trace.json.gz|raw
6c653975a4113bc37bb3152ec4af5dc974a133a9feb48ee6f8b1ee38bd1c413d|amd_mi350x_rocprofv3_results.json.gz|TL|fba8e03f774b11b1d54f6ad06c71e05b7aebc6fb|tests/rocprof/908_results.json.gz|raw
bb39639259474d490f93401ed0cec55f072f4f77d80a6ad52aaabe37663cf07e|LICENSES/TraceLens-LICENSE|TL|8bb88d0858b4817f6a0f6bb7d6f8a2210ffc80ba|LICENSE|raw
38a44cf4de905da66bd1f73f35b23fc4fa0e7f1979bf6f8468ba41fe8f6cf7c6|nvidia_a100_nsys2022.2_saxpy.sqlite.gz|hpcgroup/pipit|46d41f2a6681112c86f3a090f9241ad05226ed43|pipit/tests/data/saxpy-mpi-cuda_nsys_perlmutter0.sqlite|gzip
b8c1e68a595bf7673a4322652b60e35fa03115d66ae620e50ce9e06ebfc56b16|LICENSES/pipit-LICENSE|hpcgroup/pipit|46d41f2a6681112c86f3a090f9241ad05226ed43|LICENSE|raw
39fdab670f9e80a05ccc6d0d07611b3aeba1092fa10681d8dd08cea48d0488b5|amd_mi250_hta_minitoy_rocm6.2.pt.trace.json.gz|facebookresearch/HolisticTraceAnalysis|f9a648b4ac9b962d2572354b4539ef476bd00824|tests/data/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz|raw
da6d3703ed11cbe42bd212c725957c98da23cbff1998c05fa4b3d976d1a58e93|LICENSES/HolisticTraceAnalysis-LICENSE|facebookresearch/HolisticTraceAnalysis|f9a648b4ac9b962d2572354b4539ef476bd00824|LICENSE|raw
54e2b1ba90a4be72e43bde35661292faf8e77c726587a4535595673ae889bc34|LICENSES/rocm-systems-LICENSE|ROCm/rocm-systems|1b1610fc2b2ab32af71e6e04e4d4a6a4ae597992|projects/rocprofiler-sdk/LICENSE|raw
6668d53e9f2055e8f40f7c5dc6c98aab511525eec08802c67298a143729b5fc1|rocprofv3_csv_docs/kernel_trace.csv|ROCm/rocm-systems|1b1610fc2b2ab32af71e6e04e4d4a6a4ae597992|projects/rocprofiler-sdk/source/docs/data/kernel_trace.csv|raw
dab70bc2b624a84568e1502fc8c20f841f9689a0f0df025443e48d23ba10c3c3|rocprofv3_csv_docs/memory_copy_trace.csv|ROCm/rocm-systems|1b1610fc2b2ab32af71e6e04e4d4a6a4ae597992|projects/rocprofiler-sdk/source/docs/data/memory_copy_trace.csv|raw
60411a7b0540897dfb618d09821944e63ade409c9148b2d7e2f900f668e5e4e8|rocprofv3_csv_docs/memory_allocation_trace.csv|ROCm/rocm-systems|1b1610fc2b2ab32af71e6e04e4d4a6a4ae597992|projects/rocprofiler-sdk/source/docs/data/memory_allocation_trace.csv|raw
27a8ea16927b7adc062d76cc8da5e5d64e8c614d4aae468ff8204f5bd00522ae|rocprofv3_csv_docs/hip_api_stats.csv|ROCm/rocm-systems|1b1610fc2b2ab32af71e6e04e4d4a6a4ae597992|projects/rocprofiler-sdk/source/docs/data/hip_api_stats.csv|raw
c9b2c91456f367d5c0b098bc9d9df50564e3630a3da45562992ea11f6c687b14|rocprofv3_csv_docs/hip_domain_stats.csv|ROCm/rocm-systems|1b1610fc2b2ab32af71e6e04e4d4a6a4ae597992|projects/rocprofiler-sdk/source/docs/data/hip_domain_stats.csv|raw
afd9aa016a911bf5e212b2b4746587b3af3052a62ba371e0f74f5535bbc0c1e7|rocprofv3_csv_docs/hip_trace.csv|ROCm/rocm-systems|1b1610fc2b2ab32af71e6e04e4d4a6a4ae597992|projects/rocprofiler-sdk/source/docs/data/hip_trace.csv|raw
5ebe991965ea2c64fb1a85315038c4320141928dcab87794d4bfc25a7e408a7c|rocprofv3_csv_docs/hip_runtime_trace.csv|ROCm/rocm-systems|1b1610fc2b2ab32af71e6e04e4d4a6a4ae597992|projects/rocprofiler-sdk/source/docs/data/hip_runtime_trace.csv|raw
a772bc2295c65653cbf50e6e42885ef829aec0936eeab0da8d8add991bde045a|rocprofv3_csv_docs/rccl_trace.csv|ROCm/rocm-systems|1b1610fc2b2ab32af71e6e04e4d4a6a4ae597992|projects/rocprofiler-sdk/source/docs/data/rccl_trace.csv|raw
42535b4fc9074b3e825350f586dac53d55e478c9c073679cc568443d9eab4c99|rocprofv3_csv_docs/scratch_memory_trace.csv|ROCm/rocm-systems|1b1610fc2b2ab32af71e6e04e4d4a6a4ae597992|projects/rocprofiler-sdk/source/docs/data/scratch_memory_trace.csv|raw
4b10081d7bcaa3e742c453120f795ab0c4ff660f7f50852dd0204d30cfcc870c|rocprofv3_csv_docs/rocpd-to-csv.csv|ROCm/rocm-systems|1b1610fc2b2ab32af71e6e04e4d4a6a4ae597992|projects/rocprofiler-sdk/source/docs/data/rocpd-to-csv.csv|raw
598c881c5a6c5fb633d5551bcdd2e0f3334ffe07e261f4212b3bb02d53d24ef9|rocprofv3_csv_docs/summary.txt|ROCm/rocm-systems|1b1610fc2b2ab32af71e6e04e4d4a6a4ae597992|projects/rocprofiler-sdk/source/docs/data/summary.txt|raw
EOF
)

die() { echo "error: $*" >&2; exit 1; }

sha_of() {  # sha256 of a local fixture as published (decompressed when stored gzip'ed here)
    local file=$1 stored=$2
    if [[ $stored == gzip ]]; then gzip -dc -- "$file" | sha256sum | cut -d' ' -f1
    else sha256sum -- "$file" | cut -d' ' -f1; fi
}

verify() {  # every fixture of the manifest must be present in DIR/traces with its checksum
    local traces=$1/traces bad=0 n=0 sha rel repo commit remote stored got
    [[ -d $traces ]] || die "$traces: no such folder"
    while IFS='|' read -r sha rel repo commit remote stored; do
        n=$((n + 1))
        if [[ ! -f $traces/$rel ]]; then
            echo "missing  $rel"; bad=$((bad + 1)); continue
        fi
        got=$(sha_of "$traces/$rel" "$stored")
        if [[ $got == "$sha" ]]; then echo "ok       $rel"
        else echo "MISMATCH $rel (sha256 $got, expected $sha)"; bad=$((bad + 1)); fi
    done <<< "$MANIFEST"
    [[ $bad -eq 0 ]] || die "$bad of $n fixtures missing or not matching their sha256 in $traces"
    echo "all $n fixtures match their sha256"
}

fetch() {
    local traces=$1/traces sha rel repo commit remote stored tmp got
    command -v curl >/dev/null || die "curl is needed to download the fixtures"
    mkdir -p "$traces/LICENSES" "$traces/rocprofv3_csv_docs"
    while IFS='|' read -r sha rel repo commit remote stored; do
        [[ $repo == TL ]] && repo=$TL
        if [[ -f $traces/$rel && $(sha_of "$traces/$rel" "$stored") == "$sha" ]]; then
            echo "have     $rel"; continue
        fi
        tmp=$(mktemp "$traces/.fetch.XXXXXX")
        curl -fsSL --retry 3 -o "$tmp" "$GH/$repo/$commit/$remote" \
            || { rm -f "$tmp"; die "cannot download $GH/$repo/$commit/$remote"; }
        got=$(sha256sum -- "$tmp" | cut -d' ' -f1)
        if [[ $got != "$sha" ]]; then
            rm -f "$tmp"
            die "$repo@$commit:$remote has sha256 $got, expected $sha (a Git LFS pointer or a changed file?)"
        fi
        if [[ $stored == gzip ]]; then gzip -n -9 -c -- "$tmp" > "$tmp.gz" && rm -f "$tmp" && tmp=$tmp.gz; fi
        mv -f -- "$tmp" "$traces/$rel"
        echo "fetched  $rel"
    done <<< "$MANIFEST"
    verify "$1"
}

here=$(cd "$(dirname "$0")/.." && pwd)
case "${1:-}" in
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    --verify) [[ $# -eq 2 ]] || die "usage: $0 --verify DIR"; verify "$2" ;;
    *) [[ $# -le 1 ]] || die "usage: $0 [DIR] | --verify DIR"; fetch "${1:-$here/../shared/fixtures}" ;;
esac
