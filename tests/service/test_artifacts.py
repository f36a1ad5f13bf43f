"""Recorded artifacts, served: bytes checked against their sha256, a content type from the
name, passive types inline and anything a browser would run as a download, a link and a
preview on the Turns page. Who may fetch what is in ``test_outcome_isolation``.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import anyio
import httpx
import pytest

from envharness.records import Artifact
from envharness.service.http.artifacts import content_disposition, media_type_of
from envharness.service.pages.artifact_view import PREVIEW_BYTES
from envharness.service.state import Address, Service
from envharness.store import open_store
from tests.service._support import (
    SessionWriter,
    World,
    free_port,
    get_page,
    make_world,
    running_server,
)
from tests.service._views_support import HTML_PAGE, SVG, board, png, write_views_store

pytestmark = pytest.mark.anyio

BOARD_1, BOARD_2, FRAME, PAGE, DRAWING = 7, 13, 14, 15, 16
"""Seqs of the table's artifact records: a board after moves 1 and 2, then the PNG, the HTML
page and the SVG kept after move 2."""


@pytest.fixture(scope="module")
def table_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    store = tmp_path_factory.mktemp("artifacts") / "store"
    session_id, _ = write_views_store(store)
    return store, session_id


@pytest.fixture(scope="module")
def table(table_store: tuple[Path, str]) -> tuple[World, str]:
    return make_world(table_store[0]), table_store[1]


def _url(session_id: str, seq: int) -> str:
    return f"/api/sessions/{session_id}/records/{seq}/artifact"


async def test_a_text_artifact_is_sent_inline_as_text(table: tuple[World, str]) -> None:
    world, session_id = table
    async with world.client("viewer") as client:
        response = await client.get(_url(session_id, BOARD_1))
    assert response.status_code == 200
    assert response.content == board(1)
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    assert response.headers["content-disposition"] == (
        "inline; filename=\"board.txt\"; filename*=UTF-8''board.txt"
    )
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["content-security-policy"] == "default-src 'none'; sandbox"
    assert response.headers["cache-control"] == "no-store"


async def test_an_image_is_sent_inline_as_itself(table: tuple[World, str]) -> None:
    world, session_id = table
    async with world.client("admin") as client:
        response = await client.get(_url(session_id, FRAME))
    assert response.status_code == 200
    assert response.content == png()
    assert response.headers["content-type"] == "image/png"
    assert response.headers["content-disposition"].startswith('inline; filename="frame.png"')


async def test_html_and_svg_are_downloads_never_documents(table: tuple[World, str]) -> None:
    world, session_id = table
    async with world.client("viewer") as client:
        for seq, data, name in ((PAGE, HTML_PAGE, "page.html"), (DRAWING, SVG, "drawing.svg")):
            response = await client.get(_url(session_id, seq))
            assert response.status_code == 200
            assert response.content == data
            assert response.headers["content-type"] == "application/octet-stream"
            assert response.headers["content-disposition"].startswith(
                f'attachment; filename="{name}"'
            )
            assert "sandbox" in response.headers["content-security-policy"]


async def test_what_is_not_an_artifact_is_a_404_that_says_why(table: tuple[World, str]) -> None:
    world, session_id = table
    async with world.client("viewer") as client:
        observation = await client.get(_url(session_id, 3))
        assert observation.status_code == 404
        assert (
            "record 3 is a observation record, which references no artifact"
            in (observation.json()["message"])
        )
        beyond = await client.get(_url(session_id, 10_000))
        assert beyond.status_code == 404
        assert "no record 10000" in beyond.json()["message"]
        unknown = await client.get(_url("ses_00000000000000000000ff", BOARD_1))
        assert unknown.status_code == 404
        assert "no session 'ses_00000000000000000000ff'" in unknown.json()["message"]
        prefix = await client.get(_url(session_id[:-2], BOARD_1))
        assert prefix.status_code == 404  # the API names sessions exactly
        negative = await client.get(f"/api/sessions/{session_id}/records/-1/artifact")
        assert negative.status_code == 404
    async with world.client("none") as client:
        assert (await client.get(_url(session_id, BOARD_1))).status_code == 401


async def test_a_modified_or_missing_file_is_a_conflict_not_its_bytes(
    table_store: tuple[Path, str], tmp_path: Path
) -> None:
    store = Path(shutil.copytree(table_store[0], tmp_path / "store"))
    world = await anyio.to_thread.run_sync(make_world, store)
    session_id = table_store[1]
    frame = store / "artifacts" / hashlib.sha256(png()).hexdigest()[:2]
    path = frame / hashlib.sha256(png()).hexdigest()
    path.write_bytes(b"not the recorded frame")
    async with world.client("viewer") as client:
        response = await client.get(_url(session_id, FRAME))
        assert response.status_code == 409
        assert "was modified" in response.json()["message"]
        assert "envharness verify" in response.json()["message"]
        path.unlink()
        gone = await client.get(_url(session_id, FRAME))
        assert gone.status_code == 409
        assert "is missing from the store" in gone.json()["message"]
    page = await get_page(world, "viewer", f"/sessions/{session_id}/turns")
    assert f'href="{_url(session_id, FRAME)}"' in page  # the record is shown, and linked


async def test_the_turns_page_links_and_previews_artifacts(table: tuple[World, str]) -> None:
    world, session_id = table
    page = await get_page(world, "viewer", f"/sessions/{session_id}/turns")
    for seq in (BOARD_1, BOARD_2, FRAME, PAGE, DRAWING):
        assert f'<a class="artifact-link" href="{_url(session_id, seq)}">Open</a>' in page
    assert f'<img src="{_url(session_id, FRAME)}" alt="frame.png" loading="lazy">' in page
    item = page.split(f'<li id="r{BOARD_1}">')[1].split("</li>")[0]
    assert "board.txt · 46 bytes · text/plain" in item
    assert '<span class="ansi-fg2">table after move 1</span>' in item
    assert "&lt;b&gt;not markup&lt;/b&gt;" in item
    for seq in (PAGE, DRAWING):  # linked, never drawn
        item = page.split(f'<li id="r{seq}">')[1].split("</li>")[0]
        assert "artifact-preview" not in item
        assert "application/octet-stream" in item
    assert "alert('artifact')" not in page
    assert 'alert("svg")' not in page


async def test_a_long_text_artifact_is_previewed_by_its_first_bytes(tmp_path: Path) -> None:
    data = ("é" * PREVIEW_BYTES).encode()  # two bytes a character: the cut falls mid-character
    writer = SessionWriter(["alice"], turns=1)
    async with open_store(tmp_path / "store") as store:
        rows, blobs = writer.start()
        turn, more = writer.turn(1)
        sha256 = await store.put_artifact(data)
        kept = Artifact(name="notes.md", sha256=sha256, size=len(data))
        await store.append([*rows, *turn, writer.chain.seal(kept, turn=1)], {**blobs, **more})
        await store.append(writer.finish())
    world = await anyio.to_thread.run_sync(make_world, tmp_path / "store")
    page = await get_page(world, "viewer", f"/sessions/{writer.id}/turns")
    item = page.split("notes.md")[1].split("</li>")[0]
    assert "é" * (PREVIEW_BYTES // 2) in item
    assert "\ufffd" not in item
    assert f"the first {PREVIEW_BYTES:,} of {len(data):,} bytes" in item
    async with world.client("viewer") as client:
        response = await client.get(_url(writer.id, 3 + 3 + 1))
    assert response.content == data
    assert response.headers["content-type"] == "text/markdown; charset=utf-8"


def test_the_type_comes_from_the_name_and_active_types_are_downloads() -> None:
    assert media_type_of("a.png") == "image/png"
    assert media_type_of("a.WEBP") == "image/webp"
    assert media_type_of("run.log") == "text/plain"
    assert media_type_of("rows.jsonl") == "application/x-ndjson"
    assert media_type_of("a.json") == "application/json"
    assert media_type_of("a.tar.gz") == "application/gzip"
    for active in ("a.html", "a.htm", "a.svg", "a.xml", "a.js", "a.xhtml"):
        assert media_type_of(active) == "application/octet-stream", active
    assert media_type_of("noext") == "application/octet-stream"
    assert media_type_of("noext", "image/png") == "image/png"  # the recorded type, if any
    assert media_type_of("noext", "text/html") == "application/octet-stream"


def test_the_file_name_is_sent_safely() -> None:
    assert content_disposition("../../etc/passwd", "text/plain") == (
        "inline; filename=\"passwd\"; filename*=UTF-8''passwd"
    )
    tricky = content_disposition('a"b;c\\d\r\nX-Evil: 1.txt', "text/plain")
    assert "\r" not in tricky
    assert "\n" not in tricky
    assert tricky.startswith('inline; filename="d__X-Evil: 1.txt"')
    assert content_disposition("grün.png", "image/png") == (
        "inline; filename=\"gr_n.png\"; filename*=UTF-8''gr%C3%BCn.png"
    )
    assert content_disposition("", "application/zip").startswith('attachment; filename="artifact"')


def test_a_real_server_sends_the_bytes(table_store: tuple[Path, str]) -> None:
    """Through uvicorn on a free loopback port: length, type and bytes as recorded."""
    store, session_id = table_store
    world = make_world(store, port=free_port())
    service: Service = world.service
    assert service.address == Address("127.0.0.1", service.address.port)
    with running_server(service) as url:
        headers = {"Authorization": f"Bearer {world.secrets['viewer']}"}
        response = httpx.get(f"{url}{_url(session_id, FRAME)}", headers=headers, timeout=10)
        head = httpx.head(f"{url}{_url(session_id, FRAME)}", headers=headers, timeout=10)
    assert response.status_code == 200
    assert response.content == png()
    assert response.headers["content-length"] == str(len(png()))
    assert head.status_code == 200
    assert head.headers["content-type"] == "image/png"


async def test_an_artifact_records_own_page_links_its_file(table: tuple[World, str]) -> None:
    world, session_id = table
    page = await get_page(world, "viewer", f"/sessions/{session_id}/records/{FRAME}")
    assert f'<a class="artifact-link" href="{_url(session_id, FRAME)}">frame.png</a>' in page
    assert '<span class="muted">image/png</span>' in page
