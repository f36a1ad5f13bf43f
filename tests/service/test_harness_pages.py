"""The viewer's Harnesses destination: versions, a version, optimizer runs, a run, a diff — for
each role, with bad input, and with patch code that holds markup (shown, never run).

The store is written by the real optimizer (``_harness_store``): harness-v1 blocks editing
before the tests ran, with a message holding ``</code></pre><script>…</script>``; harness-v2
stacks a hook that keeps ``rm`` inside the workspace.
"""

from __future__ import annotations

import html
import re

import anyio.to_thread
import pytest

from tests.service._harness_store import SCRIPT, write_run_in_progress
from tests.service._support import World, get_page

pytestmark = pytest.mark.anyio

PAGES = (
    "/harnesses",
    "/harnesses/versions/harness-v1",
    "/harnesses/versions/harness-v2",
    "/harnesses/runs",
    "/harnesses/runs/{run}",
    "/harnesses/diff",
    "/harnesses/diff?old=harness-v1&new=harness-v2",
)


async def _run_id(world: World) -> str:
    [info] = await world.service.store.optimizer_runs()
    return info.id


def _assert_escaped(text: str) -> None:
    """The patch's markup is on the page as text, and nowhere as markup."""
    assert html.escape(SCRIPT, quote=True) in text
    assert "<script>alert" not in text
    assert "</code></pre><script>" not in text
    assert re.findall(r"<script[^>]*>", text) == ['<script src="/static/viewer.js" defer>']


async def test_harnesses_is_a_global_destination(harness_world: World) -> None:
    text = await get_page(harness_world, "viewer", "/")
    assert '<a href="/harnesses">Harnesses</a>' in text
    text = await get_page(harness_world, "viewer", "/harnesses")
    assert 'aria-current="page" class="active">Harnesses</a>' in text
    for tab in ('href="/harnesses/runs">Optimizer runs', 'href="/harnesses/diff">Diff'):
        assert tab in text
    table = text.split('<table class="table harness-versions">', 1)[1].split("</table>", 1)[0]
    versions = re.findall(r'<a href="/harnesses/versions/([^"]+)"><b>', table)
    assert versions == ["harness-v2", "harness-v1"]  # newest first
    run_id = await _run_id(harness_world)
    assert table.count(f'href="/harnesses/runs/{run_id}"') == 2
    assert "<b>2</b>/18 passed · mean 0.111" in table  # harness-v1's before
    assert "<b>18</b>/18 passed · mean 1.000" in table  # harness-v2's after
    assert "+0.444" in table
    assert "p=0.00391" in table


async def test_a_participant_sees_no_harnesses(harness_world: World) -> None:
    text = await get_page(harness_world, "alice", "/trajectories")
    assert 'href="/harnesses"' not in text
    run_id = await _run_id(harness_world)
    for path in (*PAGES, "/harnesses/versions/harness-v9", "/harnesses/runs/opt_missing"):
        text = await get_page(harness_world, "alice", path.format(run=run_id), status=403)
        assert "Not allowed" in text
        await get_page(harness_world, "none", path.format(run=run_id), status=401)
    for path in PAGES:
        await get_page(harness_world, "admin", path.format(run=run_id))


async def test_a_version_shows_its_code_escaped_and_what_justified_it(
    harness_world: World,
) -> None:
    store = harness_world.service.store
    [v1, v2] = await store.harness_versions()
    text = await get_page(harness_world, "viewer", "/harnesses/versions/harness-v2")
    _assert_escaped(text)
    assert "<h1>harness-v2</h1>" in text
    assert 'href="/harnesses/versions/harness-v1"' in text
    assert 'href="/harnesses/diff?old=harness-v1&amp;new=harness-v2">Diff with harness-v1' in text
    async with harness_world.client("viewer") as client:
        run = (await client.get(f"/api/optimizer/runs/{v2.run_id}")).json()
    first, second = (version["after"]["experiment_id"] for version in run["versions"])
    # Its rerun, and the one it was compared with (harness-v1's), link to their experiments.
    assert f'href="/experiments/{second}"' in text
    assert f'href="/experiments/{first}"' in text
    assert 'on_before_action</td><td class="mono">block_and_prompt</td>' in text
    assert text.count('<figure class="hook-code">') == 2
    assert "from harness-v1" in text  # hook 1 came with the parent
    assert '<span class="tag tag-ok">new</span>' in text  # hook 2 is this version's
    assert "No candidate broke a previously solved scenario on the way" in text
    for label in ("Engineer tokens", "Rerun tokens", "Wall time", "Paired sign test"):
        assert label in text
    async with harness_world.client("viewer") as client:
        for experiment in (first, second):
            assert (await client.get(f"/experiments/{experiment}")).status_code == 200

    text = await get_page(harness_world, "viewer", "/harnesses/versions/harness-v1")
    _assert_escaped(text)
    ledger = text.split("<h2>Regressions</h2>", 1)[1].split("</section>", 1)[0]
    assert re.findall(r"<b>(tidy-\d)</b>", ledger) == ["tidy-1", "tidy-2"]
    assert f'href="/harnesses/runs/{v1.run_id}#candidate-1-0"' in ledger
    assert "Diff with" not in text  # harness-v1 stacks on the unpatched harness


async def test_a_run_shows_every_candidate_and_its_verdict(harness_world: World) -> None:
    run_id = await _run_id(harness_world)
    text = await get_page(harness_world, "viewer", f"/harnesses/runs/{run_id}")
    _assert_escaped(text)
    assert "<h1>shell-tune " in text
    assert 'data-status="completed"' in text
    for anchor in ("iteration-1", "iteration-2", "candidate-1-0", "candidate-1-2", "candidate-2-0"):
        assert f'id="{anchor}"' in text
    one = text.split('id="iteration-1"', 1)[1].split('id="iteration-2"', 1)[0]
    verdicts = re.findall(r'<span class="tag verdict [^"]*">(\w+)</span>', one)
    assert verdicts == ["rejected", "accepted", "invalid"]
    assert "breaks previously solved scenario(s): tidy-1, tidy-2" in one
    assert "the patch is not valid JSON" in one
    assert "&lt;patch&gt;this is not JSON&lt;/patch&gt;" in one  # the raw answer, escaped
    assert len(re.findall(r'href="/experiments/exp_[^"]+"', one)) == 2  # two candidates reran
    assert 'href="/harnesses/versions/harness-v1"' in one
    assert "the unpatched harness" in one
    async with harness_world.client("viewer") as client:
        for href in sorted(set(re.findall(r'href="(/(?:experiments|harnesses)/[^"#]+)', text))):
            response = await client.get(html.unescape(href))
            assert response.status_code == 200, href


async def test_the_runs_list(harness_world: World) -> None:
    run_id = await _run_id(harness_world)
    text = await get_page(harness_world, "viewer", "/harnesses/runs")
    assert "<h2>1 optimizer run</h2>" in text
    assert f'<a href="/harnesses/runs/{run_id}"><b>shell-tune</b></a>' in text
    assert "coding-shell@1" in text
    assert "scripted (scripted@1)" in text


async def test_the_diff_page(harness_world: World) -> None:
    text = await get_page(harness_world, "viewer", "/harnesses/diff")  # the latest and its parent
    assert "<h2>harness-v1 → harness-v2</h2>" in text
    assert '<option value="harness-v1" selected>' in text
    assert '<option value="harness-v2" selected>' in text
    added = re.findall(r'<span class="diff-add">([^<]*)</span>', text)
    assert "+# hook 2: on_before_action" in added
    assert any("only remove files inside the workspace" in line for line in added)
    _assert_escaped(text)  # the unchanged context line holds the markup
    text = await get_page(harness_world, "viewer", "/harnesses/diff?old=harness-v2&new=harness-v2")
    assert "harness-v2 and harness-v2 have the same hooks." in text
    text = await get_page(harness_world, "viewer", "/harnesses/diff?new=harness-v1")
    assert "harness-v1 stacks on the unpatched harness" in text


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/harnesses/versions/harness-v9", 404),
        ("/harnesses/runs/opt_missing", 404),
        ("/harnesses/diff?old=harness-v1&new=harness-v9", 404),
        ("/harnesses/diff?old=harness-v0&new=harness-v2", 404),
        ("/harnesses/diff?old=../etc&new=harness-v2", 422),
        ("/harnesses/diff?left=harness-v1", 422),
        ("/harnesses?page=2", 422),
        ("/harnesses/runs/{run}?verbose=1", 422),
    ],
)
async def test_bad_requests_are_pages_that_say_why(
    harness_world: World, path: str, status: int
) -> None:
    run_id = await _run_id(harness_world)
    text = await get_page(harness_world, "viewer", path.format(run=run_id), status=status)
    assert '<div class="card problem">' in text


async def test_a_run_prefix_names_no_run_in_a_url(harness_world: World) -> None:
    run_id = await _run_id(harness_world)
    await get_page(harness_world, "viewer", f"/harnesses/runs/{run_id[:-3]}", status=404)


async def test_a_store_without_versions_says_how_to_make_one(world: World) -> None:
    for path in ("/harnesses", "/harnesses/runs", "/harnesses/diff"):
        text = await get_page(world, "viewer", path)
        assert "No harness versions yet" in text
        assert "selftest" in text


async def test_a_run_still_going_shows_its_undecided_iteration(harness_world: World) -> None:
    run_id = await anyio.to_thread.run_sync(write_run_in_progress, harness_world.store)
    text = await get_page(harness_world, "viewer", f"/harnesses/runs/{run_id}")
    assert 'data-status="running"' in text
    assert '<span class="tag">being judged</span>' in text
    assert '<span class="tag">pending</span>' in text
    _assert_escaped(text)  # its one answer holds the markup, shown as the engineer sent it
    listed = await get_page(harness_world, "viewer", "/harnesses/runs")
    assert "<h2>2 optimizer runs</h2>" in listed
    assert f'href="/harnesses/runs/{run_id}"' in listed
