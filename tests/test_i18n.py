"""The Japanese edition: built from the English, in step with it, and speaking Japanese."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from ja_guard import FENCE, english_in_japanese

from ddp_helpers import i18n
from ddp_helpers.authoring import translations
from ddp_helpers.authoring.build import LANGUAGE_TAG, build_lessons
from ddp_helpers.exercises import NOTEBOOKS, lesson_of_notebook
from support import ROOT

ENGLISH = sorted((ROOT / "solutions").glob(NOTEBOOKS))


def _ja(path: Path) -> Path:
    return path.parent / "ja" / path.name


def _edition_only(cell) -> bool:
    return cell.metadata.get("ddp_basics", {}).get("edition_only", False)


@pytest.mark.parametrize("path", ENGLISH, ids=lesson_of_notebook)
def test_the_japanese_solution_has_the_english_code_and_translates_every_markdown_cell(path):
    """Its code is the English code, or a translation of it: the same code, comments and
    the strings it prints aside (same_code); every markdown cell translated."""
    from ddp_helpers.authoring.same_code import differences

    english = nbformat.read(path, as_version=4)
    japanese = nbformat.read(_ja(path), as_version=4)
    assert japanese.metadata["language"] == "ja"
    own = [
        c
        for c in japanese.cells
        if LANGUAGE_TAG not in c.metadata.get("tags", []) and not _edition_only(c)
    ]
    assert [c.get("id") for c in own] == [c.get("id") for c in english.cells]
    for en, ja in zip(english.cells, own, strict=True):
        assert en.cell_type == ja.cell_type, en.get("id")
        if en.cell_type == "code":
            assert differences(en.source, ja.source) == [], f"{path.name}, cell {en.get('id')}"
        else:
            assert ja.metadata["ddp_basics"]["translates"] == translations.text_hash(en.source)
            assert sum(map(_is_japanese, ja.source)) > len(ja.source) / 5, en.get("id")


def _is_japanese(ch: str) -> bool:
    """Kana, kanji, or Japanese punctuation (、。「」: a join's translation may be only that)."""
    return "\u3001" <= ch <= "\u30ff" or "\u4e00" <= ch <= "\u9fff"


def _copy_course(tmp_path: Path) -> Path:
    for folder in ("solutions", "lessons", "i18n"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    return tmp_path


def _check(root: Path) -> list[str]:
    names = {p.name for p in ENGLISH}
    return build_lessons(root / "solutions", root / "lessons", check=True, listed=names)


def test_a_changed_english_cell_fails_the_check_naming_the_cell_until_retranslated(tmp_path):
    root = _copy_course(tmp_path)
    assert _check(root) == []
    path = root / "solutions" / ENGLISH[1].name
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells[1:] if c.cell_type == "markdown")
    cell.source += "\n\nA sentence added later."
    nbformat.write(nb, path)
    build_lessons(root / "solutions", root / "lessons", listed={p.name for p in ENGLISH})
    drift = [p for p in _check(root) if "English text changed" in p]
    assert len(drift) == 1 and f"cell {cell.id}" in drift[0] and ENGLISH[1].name in drift[0]
    # The translator updates the text and the hash it translates: in step again.
    table = root / "i18n" / "ja" / (path.stem + ".json")
    entries = json.loads(table.read_text(encoding="utf-8"))
    entries[cell.id] = {"translates": translations.text_hash(cell.source), "text": "更新しました。"}
    table.write_text(json.dumps(entries, ensure_ascii=False), encoding="utf-8")
    assert (
        build_lessons(root / "solutions", root / "lessons", listed={p.name for p in ENGLISH}) == []
    )
    assert _check(root) == []


def test_a_markdown_cell_without_translation_is_named(tmp_path):
    root = _copy_course(tmp_path)
    table = root / "i18n" / "ja" / (ENGLISH[0].stem + ".json")
    entries = json.loads(table.read_text(encoding="utf-8"))
    dropped = sorted(k for k, v in entries.items() if "text" in v and "after" not in v)[-1]
    del entries[dropped]
    table.write_text(json.dumps(entries, ensure_ascii=False), encoding="utf-8")
    problems = _check(root)
    assert any(f"no translation of cell {dropped}" in p for p in problems), problems


def test_code_outputs_of_the_japanese_run_are_kept_while_the_code_is_unchanged(tmp_path):
    root = _copy_course(tmp_path)
    ja = nbformat.read(_ja(root / "solutions" / ENGLISH[0].name), as_version=4)
    stored = [c.outputs for c in ja.cells if c.cell_type == "code"]
    build_lessons(root / "solutions", root / "lessons", listed={p.name for p in ENGLISH})
    again = nbformat.read(_ja(root / "solutions" / ENGLISH[0].name), as_version=4)
    assert [c.outputs for c in again.cells if c.cell_type == "code"] == stored


def test_a_code_cell_changed_in_english_loses_its_outputs_in_japanese_until_run_there(tmp_path):
    # Never the English run's words under the Japanese code: the cell waits for `--execute`.
    root = _copy_course(tmp_path)
    english = root / "solutions" / ENGLISH[0].name
    nb = nbformat.read(english, as_version=4)
    cell = next(
        c
        for c in nb.cells
        if c.cell_type == "code"
        and c.outputs
        and not c.metadata.get("tags")
        and c.get("id") not in _code_entries(root, english)
    )
    cell.source += "\npass"
    nbformat.write(nb, english)
    build_lessons(root / "solutions", root / "lessons", listed={p.name for p in ENGLISH})
    ja = nbformat.read(_ja(english), as_version=4)
    (again,) = [c for c in ja.cells if c.get("id") == cell.get("id")]
    assert again.source == cell.source and again.outputs == [] and again.execution_count is None


def _code_entries(root: Path, english: Path) -> set[str]:
    table = root / "i18n" / "ja" / (english.stem + ".json")
    return {k for k, v in json.loads(table.read_text(encoding="utf-8")).items() if "code" in v}


@pytest.mark.parametrize("path", ENGLISH, ids=lesson_of_notebook)
def test_the_japanese_estimate_at_the_top_counts_japanese_characters(path):
    from ddp_helpers.authoring.pace import TARGET_MINUTES, core_path, stated
    from ddp_helpers.exercises import exercises_of

    japanese = nbformat.read(_ja(path), as_version=4)
    counted = core_path(japanese, exercises_of(lesson_of_notebook(path)))
    assert counted.japanese_characters > 500  # Japanese prose, counted as such
    assert stated(japanese) == (counted.rounded, counted.exercises), (
        f"i18n/ja/{path.stem}.json's first cell: write 約 {counted.rounded} 分"
    )
    # The Japanese reader's clock keeps the limit too (320 characters a minute).
    assert counted.rounded <= TARGET_MINUTES, f"{counted.minutes:.2f} min: shorten its prose"


def test_languages_are_checked_and_the_user_setting_wins_over_the_notebook():
    assert i18n.normalize("ja_JP.UTF-8") == "ja" and i18n.normalize("fr") is None
    with pytest.raises(ValueError, match="'ja'"):
        i18n.checked("klingon")
    code = (
        "import os, ddp_helpers, ddp_helpers.i18n as i;"
        "ddp_helpers.use_language('ja'); print(i.current(), os.environ['DDP_HELPERS_LANG'])"
    )
    env = {k: v for k, v in os.environ.items() if k != i18n.ENV}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.stdout.split() == ["ja", "ja"], run.stderr  # ranks inherit the variable
    env[i18n.ENV] = "en"
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.stdout.split() == ["en", "en"], run.stderr
    before = i18n.current()
    with i18n.using("ja"):
        assert i18n.current() == "ja"
        with i18n.using("en"):
            assert i18n.current() == "en"
        assert i18n.current() == "ja"
    assert i18n.current() == before


def _every_table() -> dict[str, i18n.Messages]:
    import importlib
    import pkgutil

    import ddp_helpers

    for module in pkgutil.walk_packages(ddp_helpers.__path__, "ddp_helpers."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    return i18n.REGISTRY


def _flat(table) -> dict[str, str]:
    """Every text of a table by key; a table of words (status names) by "key.word"."""
    out = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[str(key)] = value
    return out


def test_the_japanese_catalog_has_every_message_with_the_same_fields():
    tables = _every_table()
    catalog = i18n.catalog("ja")
    assert set(catalog) == set(tables), "ddp_helpers/locale/ja.json: domains"
    for domain, table in tables.items():
        english = _flat(table.english)
        japanese = _flat(catalog[domain])
        assert set(japanese) == set(english), f"{domain}: keys differ"
        for key, text in english.items():
            assert i18n.fields(japanese[key]) == i18n.fields(text), f"{domain}:{key}"
            assert any(_is_japanese(ch) for ch in japanese[key]) or not any(
                ch.isalpha() for ch in text
            ), f"{domain}:{key} is not translated"


def test_a_list_of_numbers_takes_its_counter_after_each_item_in_japanese():
    """「2 ランクと 3 ランク」, never 「2 と 3 ランク」: a format spec after a list field follows
    each item (texts._Joined); the checks of 4.1, 4.2 and 4.4 say so in the notebook."""
    from ddp_helpers.exercises.lesson04.capstone import MESSAGES as capstone
    from ddp_helpers.exercises.lesson04.evaluate import MESSAGES as evaluate
    from ddp_helpers.exercises.lesson04.loader import MESSAGES as loader
    from ddp_helpers.exercises.texts import Phrase, Texts, and_list

    two = and_list([2, 3])
    with i18n.using("ja"):
        shown = [
            Texts(capstone).text("ok", worlds=two, epochs=and_list([3, 5]), diff=0.0, tol=1e-6),
            Texts(loader).text(
                "loader_ok", lengths=and_list([72, 120]), batches=and_list([12, 24]), worlds=two
            ),
            Texts(evaluate).text("eval_ok", ranks=two, cases=Phrase("eval_case", n=9, want=8)),
        ]
        assert Texts({"k": "{v: 個}"}).text("k", v=and_list([1, 2, 3])) == "1 個、2 個と 3 個"
    assert "2 ランクと 3 ランク" in shown[0] and "3 エポックと 5 エポック" in shown[0]
    assert "要素 72 個と 120 個" in shown[1]
    for text in shown:
        assert not re.search(r"\d と \d+ (ランク|個|エポック)", text), text
    with i18n.using("en"):
        english = Texts(loader).text("loader_ok", lengths=two, batches=two, worlds=two)
    assert english.startswith("On the check's own data sets (2 and 3 items")


def test_a_message_answers_in_the_current_language_and_falls_back_to_english():
    table = i18n.Messages("test.fallback", {"hello": "Hello {name}", "only_en": "Only English"})
    try:
        i18n.catalog("ja")["test.fallback"] = {"hello": "こんにちは {name}"}
        with i18n.using("ja"):
            assert table["hello"].format(name="A") == "こんにちは A"
            assert table["only_en"] == "Only English"
        with i18n.using("en"):
            assert table["hello"].format(name="A") == "Hello A"
    finally:
        i18n.catalog("ja").pop("test.fallback", None)
        i18n.REGISTRY.pop("test.fallback", None)


def test_padded_counts_columns_so_that_translated_labels_line_up():
    # lesson 01's table of torchrun's variables: the same code prints both editions' columns
    assert i18n.padded("not set", 10) == f"{'not set':10s}"
    assert i18n.padded("設定なし", 10) == "設定なし  "  # four characters, eight columns
    assert i18n.padded("a longer label", 4) == "a longer label"  # never cut


# ---------------------------------------------------------------- the guard: no English joins

_FENCE = FENCE


def _english_in_japanese(line: str) -> list[str]:
    return english_in_japanese(line)


def test_the_guard_catches_what_it_is_for():
    assert _english_in_japanese("1 ステップにランクあたり 8 and 4 行")
    assert _english_in_japanese("演習 4.1 と 4.2, レッスン 02 の ... and レッスン 03 の演習 3.1")
    assert _english_in_japanese("停止しました。 ランク 0 の位置: x")
    assert not _english_in_japanese("`a and b` が真なら、'the end' と表示します。次へ")
    assert not _english_in_japanese("one after another: 0.16 s (measured)")  # no Japanese
    # English words in parentheses, unless a gloss of a glossary term or an acronym
    assert _english_in_japanese("2 ランクでの高速化率 0.92 (measured)、上限 2")
    assert _english_in_japanese("レイテンシ 151 us（fitted）")
    assert not _english_in_japanese("**ワールドサイズ**（world size）: 参加するプロセスの数")
    assert not _english_in_japanese("インタプリタロック（GIL）を共有します")
    # the words the glossary translates, bare; the call and a gloss are fine
    assert _english_in_japanese("灰色は forward、続いて backward です")
    assert _english_in_japanese("通信と計算の overlap が小さくなります")
    assert not _english_in_japanese("backward() が戻り、逆伝播（backward）が終わる")
    assert not _english_in_japanese("torch の中: backward > _engine_run_backward（graph.py）")
    assert not _english_in_japanese("forward_sync_buffers=False を渡します")
    # GPUs counted with 基
    assert _english_in_japanese("GPU を 1 つ割り当てる")
    assert _english_in_japanese("全ランクが 1 枚のカードに集まる")
    assert _english_in_japanese("2 つの GPU")
    assert not _english_in_japanese("GPU 2 基、ランク 2 つ")
    # typography and the glossary's rejected renderings
    assert _english_in_japanese("2 マシン x 2 ランクで実行します")
    assert not _english_in_japanese("2 マシン × 2 ランクで実行します")
    assert _english_in_japanese("比 (DDP の更新量) を答えます")
    assert not _english_in_japanese("`f(x)` の値（DDP の更新量）を答えます")
    assert _english_in_japanese("フォワードのたびに")
    assert _english_in_japanese("早く return したランク")
    assert _english_in_japanese("原因は前の演習にあります。あなたの shard() がまだ正しくありません")
    assert not _english_in_japanese("自分の shard() がまだ正しくありません")
    assert _english_in_japanese("凍結したパラメーターのあるモデル")
    assert _english_in_japanese("バッファーのあるモデル")
    assert not _english_in_japanese("凍結したパラメータとバッファのあるモデル")
    assert _english_in_japanese("[ddp_helpers] 注意: ランク 1 は終了時に異常終了しました")
    assert not _english_in_japanese("[ddp_helpers] 注: ランク 1 は終了時に異常終了しました")
    assert _english_in_japanese("マシン {machines} 台 × {local} ランクで、勾配が 2 倍です")
    assert not _english_in_japanese("2 マシン × 2 ランクで、勾配が 2 倍です")
    assert not _english_in_japanese("模擬マシン 2 台に分けます")
    assert _english_in_japanese("2 マシンではランク 0 と 2 が出力します")  # machines alone: 台
    assert not _english_in_japanese("マシン 2 台では、2 マシンごとに 1 回")
    assert _english_in_japanese("A100 8 基で230〜250 GB/s です")  # a number joined to Japanese
    assert _english_in_japanese("要素 72 と120個")
    assert not _english_in_japanese("A100 8 基で 230〜250 GB/s、`rank0` と `cuda:0`")
    # issue 52: the editors' read of the catalog
    assert _english_in_japanese("集団通信（barrier、all_reduce、broadcast）で待っていました")
    assert not _english_in_japanese("集団通信（バリア、all_reduce）の前に dist.barrier() を呼ぶ")
    assert not _english_in_japanese(
        "torch の中: wrapper > barrier（distributed_c10d.py、5356 行目）"
    )
    assert _english_in_japanese("チェックポイントの epoch が 3 ですが")
    assert _english_in_japanese("{epochs} epochs 学習しました")
    assert not _english_in_japanese(
        "エポック {epoch} で set_epoch(epoch) を呼び、epoch=3 と `epoch`"
    )
    assert not _english_in_japanese("{epochs: エポック}学習し、キーが 'epoch' の辞書")
    assert _english_in_japanese("async の all_reduce を待っていない")
    assert not _english_in_japanese("非同期の all_reduce（async_op=True）を待っていない")
    assert _english_in_japanese("このマシンのランク {ranks} 個には足りません")
    assert _english_in_japanese("このマシンのランク 4 個には足りません")
    assert not _english_in_japanese("このマシンの 4 個のランク、ランク 4 と 4 ランク")
    assert _english_in_japanese("ZeRO はジョブの全ランクでシャードするので")
    assert _english_in_japanese("パラメータをシャード化します")
    assert not _english_in_japanese("ZeRO はシャーディングし、シャードを分け直します")
    assert _english_in_japanese("10000 個を超えるファイル")
    assert _english_in_japanese("上限 12345 を超えました")
    assert not _english_in_japanese("10,000 個を超えるファイル、上限 12,345、1900 と 234 のモデル")
    assert not _english_in_japanese("ポート 29500 で待ち受け、プロセス 123456 が終了しました")


def test_a_mistake_title_says_a_state_not_what_happened():
    """The glossary: a mistake's title is a short plain-form phrase, 〜している / 〜していない
    (「LOCAL_RANK の代わりに RANK を使っている」), never the past 〜した. Every title the
    exercises declare (MESSAGES[f"{key}.title"]) is in an `exercises.*` domain of the catalog;
    the grader's own events (grading.scorer: "its check was stopped at the time limit") say
    what the grader did, in the past, and are not a learner's mistake."""
    from ja_guard import past_title

    assert past_title("学習率をワールドサイズ倍にした")
    assert past_title("別の dtype を通って値が丸められた")
    assert past_title("戻らなかった（無限ループの可能性）")
    assert not past_title("学習率をワールドサイズ倍にしている")
    assert not past_title("関数から戻らない（無限ループの可能性）")
    assert not past_title("CUDA がないのに nccl")
    assert not past_title("比の逆数")
    past = [
        f"{domain}:{key}: {text}"
        for domain, table in i18n.catalog("ja").items()
        if domain.startswith("exercises.")
        for key, text in _flat(table).items()
        if key.endswith(".title") and past_title(text)
    ]
    assert past == [], "\n".join(past)
    scorer = _flat(i18n.catalog("ja")["grading.scorer"])
    assert past_title(scorer["check_timeout.title"])  # an event of the grader: left in the past


def test_large_counts_print_with_their_commas_and_no_space_is_left_inside_japanese():
    """A raw integer that can pass 999 is `{n:,}` in Japanese (the glossary), so the guard's
    rule on printed numbers holds for the limits the grader and the launcher print; a field
    whose value is code or Japanese keeps no space between two Japanese characters."""
    from ddp_helpers.grading.confinement import limits, sandbox
    from ddp_helpers.launcher import failures
    from ddp_helpers.torch_compat import PeerText, Reason

    with i18n.using("ja"):
        printed = [
            sandbox.MESSAGES["disk_files"].format(count=10_000),
            sandbox.MESSAGES["tasks_hit"].format(limit=10_000, how="…"),
            limits.SEEN["tasks_counted"].format(tasks=12_345),
            failures.nproc_limit_text(63_704),
        ]
        warning = PeerText().warning(Reason.of("disabled"))
    for text in printed:
        assert re.search(r"\d{1,3}(?:,\d{3})+", text) and not _english_in_japanese(text), text
    assert "c10d'）は使用できません" in warning, warning
    assert i18n.tightened("ランク 1 は 集団通信 で") == "ランク 1 は集団通信で"
    assert i18n.tightened("rank 1 waited in a collective") == "rank 1 waited in a collective"


def test_the_guard_catches_english_in_the_japanese_code_and_what_it_prints():
    from ja_guard import comments, english_comment, english_printed

    cell = (
        '%%ddp -n 2\nx = "# not a comment"  # every rank\ny = 1  # 全ランク\n    # BEGIN SOLUTION'
    )
    assert comments(cell) == ["# every rank", "# 全ランク", "# BEGIN SOLUTION"]
    assert [english_comment(c) for c in comments(cell)] == [True, False, False]
    assert english_comment("# LOCAL_RANK, not RANK") and not english_comment("# noqa: E501")
    assert english_printed("[rank 0] I am rank 0 of 3") and english_printed("after all_reduce: 6")
    for line in (
        "[rank 1] tensor([6.])",
        "gloo",
        "cuda:0",
        "[1, 2, 3]",
        "ランク 0 の値: 6",
        "True",
    ):
        assert not english_printed(line), line


def _japanese_texts():
    """(where, text) for every stored output of the Japanese solutions, every message of the
    Japanese catalog (checks, hints, feedback, the launcher, the grader) and every translated
    markdown cell outside its code blocks."""
    for path in sorted((ROOT / "solutions" / "ja").glob(NOTEBOOKS)):
        for cell in nbformat.read(path, as_version=4).cells:
            for out in cell.get("outputs", []):
                text = out.get("text", "") + out.get("data", {}).get("text/plain", "")
                yield f"{path.name} {cell.get('id')}", text
    for domain, table in i18n.catalog("ja").items():
        for key, text in _flat(table).items():
            yield f"ddp_helpers/locale/ja.json {domain}:{key}", text
    for path in sorted((ROOT / "i18n" / "ja").glob("*.json")):
        for cell_id, entry in json.loads(path.read_text(encoding="utf-8")).items():
            if "text" in entry:
                yield f"{path.name} {cell_id}", _FENCE.sub(" ", entry["text"])
    for page in ("recipe.md", "glossary.md"):  # the edition's pages beside the notebooks
        text = (ROOT / "lessons" / "ja" / page).read_text(encoding="utf-8")
        if page == "glossary.md":  # its first column is the English term, on purpose
            text = re.sub(r"^\|[^|\n]*\|", "|", text, flags=re.M)
        yield f"lessons/ja/{page}", _FENCE.sub(" ", text)
    yield "lessons/ja/ddp_recipe.py", "\n".join(_script_words(RECIPE_SCRIPT_JA))


# The last page's script (recipe.md quotes it): its docstring and comments are Japanese text.
RECIPE_SCRIPT_JA = ROOT / "lessons" / "ja" / "ddp_recipe.py"


def _script_words(path: Path) -> list[str]:
    """A script's docstring and its comments, the words a reader of the script reads."""
    import ast

    from ja_guard import comments

    source = path.read_text(encoding="utf-8")
    return [ast.get_docstring(ast.parse(source)) or "", *comments(source)]


def test_no_english_joins_japanese_text_in_any_output_message_or_cell():
    problems = [
        f"{where}: {', '.join(found)}: {line.strip()[:120]}"
        for where, text in _japanese_texts()
        for line in text.splitlines()
        if (found := _english_in_japanese(line))
    ]
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("language", ["en", "ja"])
def test_the_notebooks_messages_begin_with_the_mark_of_their_status(language):
    """verdicts.LOOKS is how a status looks everywhere: the check's messages in the notebook
    (in the catalog, in every language) begin with the same mark as the feedback's table."""
    from ddp_helpers import i18n
    from ddp_helpers.exercises import texts
    from ddp_helpers.exercises.verdicts import CheckStatus, mark

    starts = {
        "correct": CheckStatus.CORRECT,
        "wrong": CheckStatus.WRONG,
        "error": CheckStatus.ERROR,
        "not_attempted": CheckStatus.NOT_ATTEMPTED,
        "not_attempted_other": CheckStatus.NOT_ATTEMPTED,
        "not_attempted_pasted": CheckStatus.NOT_ATTEMPTED,
    }
    with i18n.using(language):
        for key, status in starts.items():
            assert texts.MESSAGES[key].startswith(mark(status) + " "), (key, texts.MESSAGES[key])


def _table(root: Path, path: Path) -> tuple[Path, dict]:
    table = root / "i18n" / "ja" / (path.stem + ".json")
    return table, json.loads(table.read_text(encoding="utf-8"))


def _cell(path: Path, cell_id: str):
    return next(c for c in nbformat.read(path, as_version=4).cells if c.get("id") == cell_id)


def test_a_translated_code_cell_runs_in_the_edition_and_one_that_changes_the_code_is_refused(
    tmp_path,
):
    root = _copy_course(tmp_path)
    english = root / "solutions" / ENGLISH[0].name
    source = _cell(english, "01-06").source
    assert "# no rank leaves" in source and 'print(f"I am rank ' in source
    translated = source.replace(
        "# no rank leaves before every rank has joined", "# 全員がそろうまで"
    ).replace(
        '"I am rank {dist.get_rank()} of {dist.get_world_size()}"',
        '"私は {dist.get_world_size()} ランク中のランク {dist.get_rank()} です"',
    )
    table, entries = _table(root, english)
    entries["01-06"] = {"translates": translations.text_hash(source), "code": translated}
    table.write_text(json.dumps(entries, ensure_ascii=False), encoding="utf-8")
    listed = {p.name for p in ENGLISH}
    assert build_lessons(root / "solutions", root / "lessons", listed=listed) == []
    for folder in ("solutions", "lessons"):
        assert _cell(_ja(root / folder / english.name), "01-06").source == translated
    assert _cell(root / "lessons" / english.name, "01-06").source == source  # English as it was

    # The same entry, with one number changed: refused, the cell and line named, and the
    # English code runs in the edition until it is fixed.
    entries["01-06"]["code"] = translated.replace('"gloo"', '"nccl"')
    table.write_text(json.dumps(entries, ensure_ascii=False), encoding="utf-8")
    problems = build_lessons(root / "solutions", root / "lessons", listed=listed)
    assert len(problems) == 1 and "cell 01-06" in problems[0], problems
    assert "line 2" in problems[0] and "'nccl' replaces 'gloo'" in problems[0]
    assert _cell(_ja(root / "solutions" / english.name), "01-06").source == source
    # ... and when the English code changes, the translation is stale until redone.
    entries["01-06"]["code"] = translated
    entries["01-06"]["translates"] = "0" * 16
    table.write_text(json.dumps(entries, ensure_ascii=False), encoding="utf-8")
    problems = build_lessons(root / "solutions", root / "lessons", listed=listed)
    assert len(problems) == 1 and "English code changed" in problems[0], problems


def test_a_cell_of_the_japanese_edition_alone_follows_the_cell_it_names(tmp_path):
    root = _copy_course(tmp_path)
    english = root / "solutions" / ENGLISH[0].name
    table, entries = _table(root, english)
    entries["01-ja-summary"] = {"after": "01-25", "text": "## まとめ\n\n- ランクはプロセスです。"}
    table.write_text(json.dumps(entries, ensure_ascii=False), encoding="utf-8")
    listed = {p.name for p in ENGLISH}
    assert build_lessons(root / "solutions", root / "lessons", listed=listed) == []
    for folder in ("solutions", "lessons"):
        ids = [c.get("id") for c in nbformat.read(_ja(root / folder / english.name), 4).cells]
        assert ids[ids.index("01-25") + 1] == "01-ja-summary", folder
    ids = [c.get("id") for c in nbformat.read(root / "lessons" / english.name, 4).cells]
    assert "01-ja-summary" not in ids
    entries["01-ja-summary"]["after"] = "01-99"
    table.write_text(json.dumps(entries, ensure_ascii=False), encoding="utf-8")
    problems = build_lessons(root / "solutions", root / "lessons", listed=listed)
    assert len(problems) == 1 and "no cell 01-99" in problems[0], problems


def test_the_japanese_stubs_say_their_exercise_in_japanese_and_the_checks_know_them():
    from ddp_helpers.stubs import exercise_in, exercise_raised

    lesson = nbformat.read(_ja(ROOT / "lessons" / ENGLISH[0].name), as_version=4)
    stubs = [
        line
        for cell in lesson.cells
        if cell.cell_type == "code"
        for line in cell.source.splitlines()
        if exercise_in(line)
    ]
    assert stubs and all('("演習 1.' in line for line in stubs), stubs
    assert exercise_raised("NotImplementedError", "演習 1.2") == "1.2"
    assert exercise_raised("NotImplementedError", "exercise 1.2") == "1.2"


# Lines printed in English that are not ours to translate: torch's or Python's own words, by
# cell, each line matched whole (a new English label in the same cell is still caught); and
# the lines of lessons/fsdp_train.py, one script for both editions whose printed lines stay
# English as the recipe script's do (05-51..05-53; the cells' own labels are translated).
FSDP_TRAIN_LINES = r"2 ranks, FSDP2, snapshots in \w+/|epoch \d: loss [\d.]+, snapshot epoch-\d{4}"
ENGLISH_OF_OTHERS = {
    "01-27": r"ROLE_NAME( +default, default){2}",  # the values torchrun sets
    "02-20": r"RuntimeError: Distributed package doesn't have NCCL built in",
    "02-26": r"Detected mismatch between collectives on ranks\.",
    "02-32": r"\[rank \d\] +result type Float can't be cast to the desired output type Long",
    "02-34": r"trying to initialize the default process group twice!",
    "03-40": r"RuntimeError: Expected to have finished reduction in the prior iteration .*",
    "04-e1": r"ValueError: sampler option is mutually exclusive with shuffle",
    "04-e3": r"\[rank 0\] AttributeError: 'DistributedDataParallel' object has no attribute .*",
    "04-e5": r"\[rank 0\] (RuntimeError: Error\(s\) in loading state_dict .*"
    r"|\t(Missing|Unexpected) key.*)",
    "04-e7": r"  Cell In\[\d+\], line \d+, in \w+",  # a rank's stack, as Python prints it
    "04-61": r"  Cell In\[\d+\], line \d+, in \w+|    dist\.all_reduce\(loss\)",
    "04-31": r"  Cell In\[\d+\], line \d+, in \w+",
    # lessons/fsdp_train.py's lines (one script for both editions; its printed lines stay
    # English, as the recipe script's do) and torchrun's own report of the failure.
    "05-51": FSDP_TRAIN_LINES,
    "05-52": FSDP_TRAIN_LINES
    + r"|rank 1: dying at step 15 \(FAIL_AT_STEP\)"
    + r"|torch\.distributed\.elastic\.multiprocessing\.errors\.ChildFailedError:"
    + r"|Root Cause \(first observed failure\):|  rank      : 1 \(local_rank: 1\)|  exitcode  : 1",
    "05-53": FSDP_TRAIN_LINES + r"|resuming from epoch-\d{4}: epochs \d to \d left",
}


def test_the_japanese_notebooks_code_comments_and_printed_labels_are_japanese():
    """Every comment of a Japanese solution's code cells (the exported script's cells stay
    English) and every line its code prints, but torch's and Python's own words (listed, line
    by line) and a picture's text form."""
    from ja_guard import comments, english_comment, english_printed

    problems, spoken = [], set()
    for path in sorted((ROOT / "solutions" / "ja").glob(NOTEBOOKS)):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type != "code":
                continue
            where = f"{path.name} {cell.get('id')}"
            if "export" not in cell.metadata.get("tags", []):
                problems += [f"{where}: {c}" for c in comments(cell.source) if english_comment(c)]
            for out in cell.get("outputs", []):
                if "image/png" in out.get("data", {}) or out.get("name") == "stderr":
                    continue
                text = out.get("text", "") + out.get("data", {}).get("text/plain", "")
                others = re.compile(ENGLISH_OF_OTHERS.get(cell.get("id"), r"(?!)"))
                for line in text.splitlines():
                    if not english_printed(line):
                        continue
                    if others.fullmatch(line.rstrip()):
                        spoken.add(cell.get("id"))
                    else:
                        problems.append(f"{where}: prints {line.strip()[:100]}")
    script = RECIPE_SCRIPT_JA.relative_to(ROOT)  # its printed lines stay English (recipe.md)
    comments_of_script = _script_words(RECIPE_SCRIPT_JA)[1:]
    problems += [f"{script}: {c}" for c in comments_of_script if english_comment(c)]
    assert problems == [], "\n".join(problems)
    assert spoken == set(ENGLISH_OF_OTHERS), "no English left: drop these from the list"


FIGURE = re.compile(r"図 *(\d+)-(\d+)")
CAPTION = re.compile(r"^\*\*図 (\d+)-(\d+)\*\*: \S", re.M)


@pytest.mark.parametrize("path", ENGLISH, ids=lambda p: p.stem)
def test_the_japanese_figures_are_numbered_by_lesson_and_each_has_one_caption(path):
    # 図 N-M: N the lesson's number without a zero, M from 1 in order of the captions, every
    # reference to a captioned figure of this lesson (the editor: one style in every lesson).
    lesson = int(path.stem[:2])
    text = "\n".join(
        c.source for c in nbformat.read(_ja(path), as_version=4).cells if c.cell_type == "markdown"
    )
    captions = [(int(n), int(m)) for n, m in CAPTION.findall(text)]
    assert [m for _, m in captions] == list(range(1, len(captions) + 1)), captions
    assert {n for n, _ in captions} <= {lesson}, captions
    for n, m in ((int(n), int(m)) for n, m in FIGURE.findall(text)):
        assert (n, m) in captions, f"図 {n}-{m} is referred to but has no caption in {path.name}"
    assert not re.search(r"図 *0\d-", text)
    # Each caption is the last line of the Markdown cell just before the figure's code cell.
    cells = nbformat.read(_ja(path), as_version=4).cells
    for here, after in zip(cells, cells[1:], strict=False):
        if here.cell_type == "markdown" and CAPTION.search(here.source):
            last = here.source.rstrip().splitlines()[-1]
            assert CAPTION.search(last) and after.cell_type == "code", (here.id, last)
