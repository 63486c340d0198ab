"""Text from a repo never reaches the terminal raw (issue 32 item 3, issue 37 item 6): every command prints through
one sanitiser (``fisherhub.safe_text``), so a hostile repo's ESC / BEL sequences (screen clear, window title) and
bidirectional overrides are spaces by the time they are printed. Each command is run against a hostile repo on the
local Hub server; the hostile text itself is printed (sanitised), so each test would see it raw."""

from __future__ import annotations

import contextlib
import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_hub import make_signature, set_files
from test_signature_fuzz import forged

from fisherhub import Signature
from fisherhub.cli import main
from fisherhub.hub import push_signature
from fisherhub.hub.refs import SIGNATURE_FOLDER
from fisherhub.testing.hub_repos import create_adapter

BASE = "org/base"
ESCAPE = "\x1b[2J\x1b]0;pwned\x07\u202e"
CONTROLS = ("\x1b", "\x07", "\u202e")
HOSTILE_FILE = f"{SIGNATURE_FOLDER}/a{ESCAPE}b.safetensors"


def run(argv: list[str], capsys) -> tuple[int, str]:
    """Exit code and everything the command printed (stdout and stderr), which holds no control character."""
    capsys.readouterr()  # what was printed before (e.g. the set-up's progress bars)
    code = main(argv)
    captured = capsys.readouterr()
    printed = captured.out + captured.err
    assert not [char for char in CONTROLS if char in printed], repr(printed[-2000:])
    return code, printed


def hostile(signature: Signature) -> bytes:
    """``signature``'s file with the escape sequences in its metadata (as another tool would write it)."""
    return forged(signature, dataset=f"org/pets{ESCAPE}", base_model=signature.metadata["base_model"])


@pytest.fixture
def hostile_repos(hub, hf_api, hf_hub_cache):
    """An adapter whose signature's metadata holds escape sequences, and a dataset repo holding a signature file
    whose name holds them."""
    adapter = create_adapter(hf_api, "evil/adapter", BASE)
    signature = make_signature(BASE, "org/pets", n=300, seed=1)
    push_signature(signature, adapter)
    [path] = [p for p in hub.files(adapter, "model") if p.endswith(".safetensors")]
    hf_api.upload_file(path_or_fileobj=hostile(signature), path_in_repo=path, repo_id=adapter)  # listed, hostile
    hf_api.create_repo("evil/pets", repo_type="dataset")
    hf_api.upload_file(
        path_or_fileobj=signature.to_bytes(), path_in_repo=HOSTILE_FILE, repo_id="evil/pets", repo_type="dataset"
    )
    return adapter


def test_list(hostile_repos, capsys):
    code, printed = run(["list", hostile_repos], capsys)
    assert code == 0 and "org/pets" in printed and "]0;pwned" in printed


def test_select(hostile_repos, tmp_path, capsys):
    target = tmp_path / "target.safetensors"
    make_signature(BASE, "org/target", n=300, seed=2).save(target)
    code, printed = run(["select", str(target), hostile_repos], capsys)
    assert code == 0 and "no dataset revision recorded for org/pets" in printed and "]0;pwned" in printed


def test_compare_and_pull(hostile_repos, tmp_path, capsys):
    local = tmp_path / "local.safetensors"
    make_signature(BASE, "org/local", n=300, seed=3).save(local)
    reference = f"datasets/evil/pets:{HOSTILE_FILE}"
    code, printed = run(["compare", reference, str(local), "--heatmap", ""], capsys)
    assert code == 0 and "]0;pwned" in printed  # the reference names the tasks in the tables
    code, printed = run(["pull", reference, "-o", str(tmp_path)], capsys)
    assert code == 0 and "]0;pwned" in printed  # the file's name, as written
    code, printed = run(["pull", f"datasets/evil/pets:{SIGNATURE_FOLDER}/none{ESCAPE}.safetensors"], capsys)
    assert code == 1 and "]0;pwned" in printed  # the error names the file


def _hostile_index(hub, hf_api, tmp_path) -> str:
    """An index built from two signed adapters, then given a row (a copy of one) whose repo id holds the escape
    sequences: a valid row, shown by ``index show`` and shortlisted (then skipped: no such repo) by ``select``."""
    from fisherhub.hub.signature_index import build_index

    for seed in (1, 2):
        push_signature(
            make_signature(BASE, f"org/data-{seed}", n=300, seed=seed), create_adapter(hf_api, f"org/a{seed}", BASE)
        )
    build_index(BASE, "datasets/tester/index", work=tmp_path / "work")
    files = hub.files("tester/index", "dataset")
    shard = next(p for p in files if p.endswith(".parquet"))
    table = pq.read_table(io.BytesIO(files[shard]))
    row = table.slice(0, 1).to_pylist()[0]
    hostile_row = {**row, "repo_id": f"evil/x{ESCAPE}", "num_tokens": row["num_tokens"] * 10}  # the largest row
    data = io.BytesIO()
    pq.write_table(pa.concat_tables([table, pa.Table.from_pylist([hostile_row], schema=table.schema)]), data)
    set_files(hub, "tester/index", "dataset", {shard: data.getvalue()})
    return "tester/index"


def test_index_show_and_select_index(hub, hf_api, hf_hub_cache, tmp_path, capsys):
    index = _hostile_index(hub, hf_api, tmp_path)
    code, printed = run(["index", "show", index], capsys)
    assert code == 0 and "evil/x" in printed and "]0;pwned" in printed
    target = tmp_path / "target.safetensors"
    make_signature(BASE, "org/target", n=300, seed=4).save(target)
    code, printed = run(["select", str(target), "--index", index], capsys)
    assert code == 0 and "skipped:" in printed and "evil/x" in printed and "]0;pwned" in printed


def test_the_stream_keeps_progress_bars_and_line_breaks():
    """What the sanitiser keeps: line breaks, tabs, and a carriage return that starts or ends a write (progress bars
    redraw their line); a carriage return inside a write, any other control character, becomes a space."""
    from fisherhub.safe_text import PrintableStream, printable, printable_text

    buffer = io.StringIO()
    stream = PrintableStream(buffer)
    for text in ("\r 50%|##   |", "a\tb\nc", f"x{ESCAPE}y\rz", "\r"):
        stream.write(text)
    assert buffer.getvalue() == "\r 50%|##   |" + "a\tb\nc" + "x [2J ]0;pwned  y z" + "\r"
    assert printable("a\nb\x1b") == "a b " and printable_text("a\nb\x1b") == "a\nb "


def test_rich_markup_from_a_repo_is_not_read_as_markup(hub, hf_api, hf_hub_cache, tmp_path):
    """A candidate named like rich markup (a link, a style) is shown as its text in the rich table."""
    from fisherhub.safe_text import console
    from fisherhub.selection import select_adapter

    target = make_signature(BASE, "org/target", n=300, seed=4)
    folder = tmp_path / "[link=mailto:x]evil"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": BASE, "peft_type": "LORA"}))
    push_signature(make_signature(BASE, "org/data", n=300, seed=1), folder)
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):  # console() writes to sys.stdout
        console(width=400).print(select_adapter(target, [str(folder)]).rich_table())
    assert "[link=mailto:x]evil" in buffer.getvalue() and "\x1b" not in buffer.getvalue()


def test_warnings_errors_and_logs_of_a_command_go_through_the_sanitiser(capsys):
    """Whatever a command prints, warns, logs or raises with a repo's text reaches the terminal sanitised."""
    import argparse
    import logging
    import warnings

    from fisherhub.cli import run_command
    from fisherhub.core.errors import InputError

    def hostile_command(args) -> int:
        log = logging.getLogger("fisherhub.test-hostile")
        handler = logging.StreamHandler()  # a handler the command sets up writes to the stderr it finds
        log.addHandler(handler)
        try:
            print(f"table row {ESCAPE}")
            warnings.warn(f"a warning about {ESCAPE}", UserWarning, stacklevel=1)
            log.warning("a log line about %s", ESCAPE)
        finally:
            log.removeHandler(handler)
        raise InputError(f"an error about {ESCAPE}")

    parser = argparse.ArgumentParser(prog="fisherhub")
    parser.add_subparsers().add_parser("hostile").set_defaults(func=hostile_command)
    capsys.readouterr()
    assert run_command(parser, ["hostile"]) == 1
    captured = capsys.readouterr()
    printed = captured.out + captured.err
    assert not [char for char in CONTROLS if char in printed], repr(printed)
    for line in ("table row", "warning: a warning about", "a log line about", "error: an error about"):
        assert f"{line}  [2J ]0;pwned  " in printed, (line, printed)
