"""The README's promises: the two fresh-machine commands up front, and a CLI reference that is
exactly what the parser generates."""


from specsim.cli.reference import BEGIN, END, render
from tests.fixtures import ROOT

README = ROOT / "README.md"


def test_cli_reference_matches_the_parser():
    text = README.read_text(encoding="utf-8")
    block = text[text.index(BEGIN): text.index(END) + len(END)]
    assert block == render(), "the README's CLI reference drifted: python -m specsim.cli.reference --write README.md"


def test_every_command_is_in_the_reference():
    from specsim.cli import build_parser
    from specsim.cli.reference import _walk

    block = render()
    for path, _ in _walk(build_parser(), ["specsim"]):
        assert f"### `{' '.join(path)}`" in block


def test_readme_opens_with_the_two_commands():
    first_block = README.read_text(encoding="utf-8").split("```sh", 1)[1].split("```", 1)[0]
    lines = [line.split("#")[0].strip() for line in first_block.strip().splitlines()]
    assert lines == ['pip install . && specsim demo', 'pip install ".[test]" && pytest']
