"""The browser's sign-in: a one-time link, a read-only cookie, sign-out."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest

from envharness.service.codes import LoginCodes
from envharness.service.server import write_sign_in_page
from tests.service._support import World

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _sign_in(world: World, code: str) -> tuple[int, str | None]:
    async with world.client("none") as client:
        response = await client.post("/login", data={"code": code})
        return response.status_code, response.cookies.get(world.service.cookie_name)


async def test_the_link_page_changes_nothing_and_the_post_signs_in_once(world: World) -> None:
    code = world.service.logins.issue()
    async with world.client("none") as client:
        for _ in range(3):  # a link previewer fetching the link does not use it up
            page = await client.get("/login", params={"code": code})
            assert page.status_code == 200
            assert f'value="{code}"' in page.text
            assert "/static/login.js" in page.text
        response = await client.post("/login", data={"code": code})
        assert response.status_code == 303
        assert response.headers["location"] == "/"
        cookie = response.headers["set-cookie"]
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie.replace("Strict", "strict")
        assert "Max-Age" in cookie
        assert "Path=/" in cookie
        again = await client.post("/login", data={"code": code})
        assert again.status_code == 400
        assert "already used or has expired" in again.text


async def test_the_cookie_gives_read_only_access(world: World) -> None:
    code = world.service.logins.issue()
    status, secret = await _sign_in(world, code)
    assert status == 303
    assert secret
    cookies = {world.service.cookie_name: secret}
    async with world.client("none", cookies=cookies) as client:
        assert (await client.get("/api/sessions")).status_code == 200
        assert (await client.get("/")).status_code == 200
        assert "viewer · read-only" in (await client.get("/")).text
        assert (await client.get("/api/tokens")).status_code == 403
        # not accepted where something could change: a cross-site form cannot ride it
        assert (await client.post("/api/tokens", json={"role": "admin"})).status_code == 401
        assert (await client.get("/login")).status_code == 303  # already signed in
    info = [t for t in await world.service.tokens.tokens() if t.label == "browser sign-in"]
    assert len(info) == 1
    assert info[0].role == "viewer"
    assert info[0].expires_at


async def test_an_expired_or_unknown_code_is_refused(world: World) -> None:
    clock = Clock()
    world.service.logins = LoginCodes(ttl=60, clock=clock)
    code = world.service.logins.issue()
    clock.now += 61
    assert (await _sign_in(world, code))[0] == 400
    assert (await _sign_in(world, "made-up"))[0] == 400
    assert (await _sign_in(world, ""))[0] == 400
    fresh = world.service.logins.issue()
    clock.now += 59
    assert (await _sign_in(world, fresh))[0] == 303


async def test_only_a_form_post_signs_in(world: World) -> None:
    code = world.service.logins.issue()
    async with world.client("none") as client:
        assert (await client.post("/login", json={"code": code})).status_code == 415
        assert (await client.post("/login", data={"code": "x" * 5000})).status_code == 413
    assert world.service.logins.redeem(code)


async def test_a_cookie_never_carries_more_than_viewer_access(world: World) -> None:
    cookies = {world.service.cookie_name: world.secrets["admin"]}
    async with world.client("none", cookies=cookies) as client:
        assert (await client.get("/api/sessions")).status_code == 401
        assert (await client.get("/api/tokens")).status_code == 401


async def test_sign_out_revokes_the_browser_token(world: World) -> None:
    _, secret = await _sign_in(world, world.service.logins.issue())
    assert secret
    cookies = {world.service.cookie_name: secret}
    async with world.client("none", cookies=cookies) as client:
        response = await client.post("/logout")
        assert response.status_code == 303
        assert world.service.cookie_name in response.headers["set-cookie"]
    async with world.client("none", cookies=cookies) as client:
        assert (await client.get("/api/sessions")).status_code == 401
        signed_out = await client.get("/")
        assert signed_out.status_code == 401
        assert "Sign in to the viewer" in signed_out.text


def test_codes_are_single_use_bounded_and_kept_hashed() -> None:
    codes = LoginCodes()
    issued = [codes.issue() for _ in range(20)]
    assert not any(code in repr(vars(codes)) for code in issued)
    assert not codes.redeem(issued[0])  # only the newest MAX_OPEN_CODES are kept
    assert codes.redeem(issued[-1])
    assert not codes.redeem(issued[-1])


def test_the_cookie_is_named_for_the_port(world: World) -> None:
    """Cookies ignore ports: two services on one machine must not overwrite each other's."""
    assert world.service.cookie_name == "envharness-8765"


def test_a_code_can_say_when_it_is_redeemed_and_only_then() -> None:
    codes = LoginCodes()
    redeemed: list[str] = []
    code = codes.issue(on_redeem=lambda: redeemed.append("once"))
    assert not codes.redeem("made-up")
    assert redeemed == []
    assert codes.redeem(code)
    assert not codes.redeem(code)
    assert redeemed == ["once"]


async def test_the_sign_in_page_for_open_is_private_and_sends_the_code_in_a_fragment(
    world: World, tmp_path: Path
) -> None:
    """``serve --open`` gives the browser a file's path: the code is inside, readable by this
    user only, and travels on as ``#code=``, which no request carries."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    page = write_sign_in_page(world.service, private)
    assert stat.S_IMODE(page.stat().st_mode) == 0o600
    found = re.search(r'url=(http://[^"]+)/login#code=([\w-]+)"', page.read_text())
    assert found, page.read_text()
    assert found.group(1) == world.service.address.url
    assert found.group(2) not in page.as_uri()
    async with world.client("none") as client:
        landing = await client.get("/login")  # what the browser asks for: no code in it
        assert landing.status_code == 200
        assert 'id="login-form"' in landing.text
        assert "/static/login.js" in landing.text
        assert (await client.post("/login", data={"code": found.group(2)})).status_code == 303
