"""latscope's optional C part (src/latscope/_native.c) is built where the tests run."""

from __future__ import annotations


def test_the_c_part_is_built_and_chosen():
    # scripts/install.sh builds it (setup.py) where a compiler is found; without it the client
    # costs ~3.5x the CPU per streamed token and every test of the C paths skips: CI must not
    # pass on the fallback unnoticed
    from latscope import stats
    from latscope.load import response

    assert response._native is not None, "_native.c is not built: bash scripts/install.sh"
    assert response.STREAM_PARSER == "c" and response.read_stream_quick is response._read_stream_c
    assert stats._native is response._native
