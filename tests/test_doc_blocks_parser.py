"""The conventions of tests/doc_blocks.py (which runs the README's and the docs' code blocks in CI with
`python -m pytest -m docs`): annotations parsed and checked, `append` only on topofl commands, `file`
blocks written, bash and Python blocks run in order with a failure that names the page, line and command."""
import os
import textwrap
import time

import pytest

from doc_blocks import DEFAULT_BUDGET, DocBlockError, append_to_topofl_lines, parse_page, run_page


def page(text):
    return parse_page(textwrap.dedent(text), "docs/x.md")


def test_blocks_languages_lines_and_annotations():
    p = page("""\
        # Title
        <!-- ci: file experiment.toml -->
        ```toml
        rounds = 2
        ```

        <!-- ci: append --rounds 1 -->

        ```bash
        topofl compare
        ```
        ```python title="demo"
        x = 1
        ```
        ~~~
        plain ```bash inside
        ~~~
          ```text
          indented
          ```
        <!-- ci: skip needs a GPU -->
        ```sh
        nvidia-smi
        ```
        """)
    assert [(b.line, b.lang, b.kind) for b in p.blocks] == [
        (3, "toml", "text"), (9, "bash", "bash"), (12, "python", "python"), (15, "", "text"), (18, "text", "text"),
        (22, "sh", "bash")]
    toml, bash, py, plain, indented, gpu = p.blocks
    assert toml.file == "experiment.toml" and toml.text == "rounds = 2\n"
    assert bash.append == "--rounds 1" and bash.script() == "topofl compare --rounds 1\n"
    assert py.file is py.append is py.skip is None
    assert plain.text == "plain ```bash inside\n" and indented.text == "indented\n"
    assert gpu.skip == "needs a GPU" and p.budget == DEFAULT_BUDGET


@pytest.mark.parametrize("text, message", [
    ("<!-- ci: skip -->\n```bash\nls\n```\n", "'ci: skip' needs a reason"),
    ("<!-- ci: skip   -->\n```bash\nls\n```\n", "'ci: skip' needs a reason"),
    ("<!-- ci: file -->\n```toml\na = 1\n```\n", "needs a file name"),
    ("<!-- ci: file a.toml -->\n```bash\nls\n```\n", "'ci: file' goes before a block that is not executed"),
    ("<!-- ci: file ../a.toml -->\n```toml\na = 1\n```\n", "inside the page's directory"),
    ("<!-- ci: append --x -->\n```python\nx = 1\n```\n", "'ci: append' goes before a bash block"),
    ("<!-- ci: skipp why -->\n```bash\nls\n```\n", "unknown annotation 'ci: skipp'"),
    ("<!-- ci: skip why -->\nSome prose.\n```bash\nls\n```\n", "'ci: skip' is not followed by a code block"),
    ("text\n<!-- ci: skip why -->\n", "docs/x.md:2: 'ci: skip' is not followed by a code block"),
    ("<!-- ci: timeout soon -->\n", "seconds must be a positive number"),
    ("<!-- ci: timeout 0 -->\n", "seconds must be a positive number"),
    ("<!-- ci: timeout 5 -->\n<!-- ci: timeout 6 -->\n", "a second 'ci: timeout'"),
    ("```bash\nls\n", "docs/x.md:1: the code block is never closed"),
    ("```\ntopofl compare --rounds 3\n```\n", "docs/x.md:1: an untagged block of commands"),
    ("```console\n$ topofl methods\nfedavg ...\n```\n", "a console block of commands"),
    # a command anywhere in the block, not only on its first line, and after environment assignments
    ("```console\n# list the methods\n$ topofl methods\n```\n", "a console block of commands"),
    ("```\nOMP_NUM_THREADS=1 topofl compare\n```\n", "an untagged block of commands"),
    ("```\n# first set up\npip install -e .\n```\n", "an untagged block of commands"),
    # shell-like languages the runner does not run are refused, not silently shown
    ("```zsh\ntopofl compare\n```\n", "a zsh block"),
    ("```pycon\n>>> import topofl\n```\n", "a pycon block"),
    ("```{.zsh}\ntopofl compare\n```\n", "a zsh block"),
    # ci: append after a pipe or && would go to the wrong command
    ("<!-- ci: append --seeds 0 -->\n```bash\ntopofl compare | tee log.txt\n```\n", "pipe"),
    ("<!-- ci: append --seeds 0 -->\n```bash\ntopofl methods && topofl compare\n```\n", "pipe"),
])
def test_malformed_or_misplaced_annotations_are_refused_with_page_and_line(text, message):
    with pytest.raises(DocBlockError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        parse_page(text, "docs/x.md")
    assert str(err.value).startswith("docs/x.md:")


def test_untagged_blocks_of_output_or_layouts_are_fine():
    p = page("```\nsrc/topofl/\n  cli.py   the command line\n```\n```text\ntopofl compare --rounds 3\n```\n")
    assert [b.kind for b in p.blocks] == ["text", "text"]


def test_pandoc_style_info_strings_are_read():
    p = page("```{.bash}\ntopofl methods\n```\n```{.python .numberLines}\nx = 1\n```\n")
    assert [b.kind for b in p.blocks] == ["bash", "python"]


def test_the_blocks_environment_has_no_mlflow_settings(monkeypatch):
    from doc_blocks import environment

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    assert not [k for k in environment() if k.startswith("MLFLOW_")]


def test_timeout_sets_the_page_budget():
    assert page("<!-- ci: timeout 1200 -->\n```bash\nls\n```\n").budget == 1200


def test_append_goes_only_to_topofl_commands_before_comments_and_after_continuations():
    text = textwrap.dedent("""\
        topofl compare                  # the default
        topofl run --method sheaf -p gamma=0.3   # a comment with 'quotes' and # hashes
        python -m topofl compare --seeds 0
        python3 -m topofl.cli run
        topofl compare --scenario digits \\
            --methods sheaf,fedavg  # continued
        echo topofl compare
        pip install -e . && topofl compare
        topofl-helper x
        topofl run -s "adversarial=(1,)" -p 'tag=#1'
        cat results/topofl.txt
        """)
    got = append_to_topofl_lines(text, "--rounds 1").splitlines()
    assert got == [
        "topofl compare --rounds 1  # the default",
        "topofl run --method sheaf -p gamma=0.3 --rounds 1  # a comment with 'quotes' and # hashes",
        "python -m topofl compare --seeds 0 --rounds 1",
        "python3 -m topofl.cli run --rounds 1",
        "topofl compare --scenario digits \\",
        "    --methods sheaf,fedavg --rounds 1  # continued",
        "echo topofl compare",
        "pip install -e . && topofl compare",
        "topofl-helper x",
        "topofl run -s \"adversarial=(1,)\" -p 'tag=#1' --rounds 1",
        "cat results/topofl.txt",
    ]


def test_blocks_run_in_order_share_the_directory_and_write_files(tmp_path):
    p = page("""\
        <!-- ci: file data/numbers.txt -->
        ```text
        1 2 3
        ```
        ```bash
        cat data/numbers.txt > copy.txt
        test -d examples && test -d benchmarks
        ```
        ```python
        total = sum(map(int, open("copy.txt").read().split()))
        ```
        ```bash
        echo "bash after python" > after.txt
        ```
        ```python
        assert total == 6 and open("after.txt").read() == "bash after python\\n"
        import os
        open("env.txt", "w").write(os.environ["MPLBACKEND"] + os.environ["FLWR_TELEMETRY_ENABLED"])
        ```
        <!-- ci: skip shows a failure on purpose -->
        ```bash
        exit 3
        ```
        """)
    res = run_page(p, tmp_path)
    assert res.failure is None, res.failure
    assert [b.line for b, _ in res.skipped] == [21] and res.skipped[0][1] == "shows a failure on purpose"
    assert len(res.ran) == 4 and (tmp_path / "env.txt").read_text() == "Agg0"


def test_a_failing_bash_command_is_named_with_its_page_line_and_output(tmp_path):
    p = page("""\
        Intro.

        ```bash
        echo first
        ls /no/such/dir/here
        echo never
        ```
        ```bash
        echo not reached > reached.txt
        ```
        """)
    res = run_page(p, tmp_path)
    assert res.failure is not None
    head = res.failure.splitlines()[0]
    assert head.startswith("docs/x.md:3: bash block, line 5: `ls /no/such/dir/here` exited 2"), head
    assert "first" in res.failure and "No such file" in res.failure and "never" not in res.failure
    assert not (tmp_path / "reached.txt").exists()


def test_a_failing_python_block_shows_the_traceback_with_page_lines(tmp_path):
    p = page("""\
        ```python
        x = 1
        ```
        ```python
        y = x + 1
        raise RuntimeError(f"boom {y}")
        ```
        """)
    res = run_page(p, tmp_path)
    assert res.failure is not None
    assert res.failure.startswith("docs/x.md:4: python block raised an exception: y = x + 1")
    assert 'File "docs/x.md", line 6' in res.failure and "RuntimeError: boom 2" in res.failure


def test_the_budget_stops_a_block_and_the_processes_it_started(tmp_path):
    p = page("""\
        <!-- ci: timeout 2 -->
        ```bash
        sleep 300 &
        echo $! > child.pid
        sleep 300
        ```
        """)
    t0 = time.monotonic()
    res = run_page(p, tmp_path)
    assert time.monotonic() - t0 < 20
    assert res.failure is not None and "timed out after 2 s" in res.failure and "ci: timeout SECONDS" in res.failure
    child = int((tmp_path / "child.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)


def test_a_background_process_is_stopped_when_its_block_ends(tmp_path):
    p = page("""\
        ```bash
        sleep 300 &
        echo $! > child.pid
        ```
        """)
    res = run_page(p, tmp_path)
    assert res.failure is None, res.failure
    child = int((tmp_path / "child.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)
