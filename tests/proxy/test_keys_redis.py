"""Keys and teams shared by `bamasc proxy` processes on one real Redis: made on one proxy, used and deleted on
another; their windows held across proxies under concurrent clients; kept through a proxy killed -9 mid-load;
and a Redis that lost them (FLUSHALL) answered with 503, never forwarded.

Each case is a seeded family of keys, teams and budgets, checked against what the upstream itself billed each key
and each team (the first word of each prompt names the key and scope, as ScopedUpstream reads it). Windows are a
day or an hour long, so the tests do not depend on the clock: a load that happens to cross a window's boundary is
bounded by the budgets of both windows it touched.

A real `redis-server` is started for these tests (Debian's package `redis-server`); they skip, saying so, where it
or the redis client library is absent.
"""

from __future__ import annotations

import asyncio
import random
import time

import httpx
import pytest

pytest.importorskip("starlette", reason="the proxy extra (starlette, uvicorn) is not installed")
pytest.importorskip("redis", reason="the redis client library (the proxy extra) is not installed")

from bamasc.metering.windows import window_id  # noqa: E402
from tests.proxy.fleet import REDIS_MISSING, Launcher, RedisServer, ScopedUpstream  # noqa: E402
from tests.proxy.helpers import PRICES, config_text  # noqa: E402

if REDIS_MISSING:
    pytest.skip(REDIS_MISSING, allow_module_level=True)

ADMIN_ENV = "BAMASC_TEST_ADMIN_TOKEN"
ADMIN = "admin-token-for-redis-tests"
MODEL = "gpt-4.1-mini"
PRICE_IN, PRICE_OUT = PRICES[MODEL]
SLACK = 1e-6  # µ$: the ledger's rounding


@pytest.fixture(scope="module")
def upstream():
    server = ScopedUpstream(output=200).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def launcher(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ADMIN_ENV, ADMIN)  # the helper's environment, which every proxy it forks reads
        forks = Launcher(tmp_path_factory.mktemp("proxies"))
    yield forks
    forks.close()


@pytest.fixture(scope="module")
def config(upstream, tmp_path_factory):
    path = tmp_path_factory.mktemp("config") / "proxy.bam"
    path.write_text(config_text(upstream.url, budget=100_000), encoding="utf-8")
    return str(path)


@pytest.fixture
def redis_server(tmp_path):
    server = RedisServer(tmp_path)
    yield server
    server.kill()


@pytest.fixture
def fleet(launcher, config, redis_server):
    """`start(count)`: that many proxies on the test's Redis (the first starts the ledger), each with the admin
    token; `start(join=True)` adds one that joins it."""
    started = []

    def start(count: int = 1, join: bool = False):
        proxies = []
        for index in range(count):
            first = not join and not started and index == 0
            proxy = launcher.start(config, "--redis", redis_server.url, "--admin-token-env", ADMIN_ENV,
                                   *(["--new-ledger"] if first else []))
            assert proxy.alive(), proxy.stderr
            proxies.append(proxy)
            started.append(proxy)
        return proxies

    yield start
    for proxy in started:
        proxy.kill9()


# ------------------------------------------------------------------------------------------ helpers


def _admin(proxy, method: str, path: str, body=None) -> httpx.Response:
    return httpx.request(method, f"{proxy.url}/v1/admin/{path}", json=body, timeout=30,
                         headers={"authorization": f"Bearer {ADMIN}"})


def _make(proxy, kind: str, **fields) -> dict:
    made = _admin(proxy, "POST", kind, fields)
    assert made.status_code == 201, made.text
    return made.json()


def _body(key_name: str, scope: str, cap: int | None, model: str = MODEL) -> dict:
    body = {"model": model, "messages": [{"role": "user", "content": f"{key_name}/{scope} please answer"}]}
    if cap is not None:
        body["max_tokens"] = cap
    return body


def _headers(secret: str, scope: str) -> dict:
    return {"authorization": f"Bearer {secret}", "x-bamasc-task": scope}


def call(proxy, secret: str, key_name: str, scope: str, cap: int | None = 100) -> httpx.Response:
    return httpx.post(f"{proxy.url}/v1/chat/completions", json=_body(key_name, scope, cap),
                      headers=_headers(secret, scope), timeout=30)


async def acall(client: httpx.AsyncClient, proxy, secret: str, key_name: str, scope: str, cap: int | None,
                model: str = MODEL) -> tuple[int, str]:
    """One call; (status, what ended it: '' served, the refusal's or the answer's text), status 0 for a dead proxy."""
    try:
        response = await client.post(f"{proxy.url}/v1/chat/completions", json=_body(key_name, scope, cap, model),
                                     headers=_headers(secret, scope))
    except httpx.TransportError:
        return 0, "gone"
    if response.status_code != 200:
        return response.status_code, response.json()["error"]["message"]
    if response.headers.get("x-bamasc-exhausted") == "1":
        return 200, response.json()["choices"][0]["message"]["content"]
    return 200, ""


def billed_per_key(upstream, since: int) -> dict[str, float]:
    """µ$ the upstream billed each key since call number `since`, by its own count of tokens."""
    billed: dict[str, float] = {}
    with upstream.lock:
        calls = upstream.calls[since:]
    for made in calls:
        if made["billed"]:
            key_name = made["scope"].split("/")[0]
            billed[key_name] = billed.get(key_name, 0.0) + made["prompt"] * PRICE_IN + made["completion"] * PRICE_OUT
    return billed


def windows_touched(per: str, start: float, end: float) -> int:
    """How many windows of `per` a load from `start` to `end` touched (2 only if it crossed a boundary)."""
    return len({window_id(per, start), window_id(per, end)})


def _family(rng: random.Random, teams: int, keys: int, prefix: str) -> tuple[list[dict], list[dict]]:
    """Teams and keys (the keys' fields as POST /v1/admin/keys takes them), with budgets from `rng`."""
    made_teams = [{"name": f"{prefix}team{number}",
                   "budgets": [{"amount": float(rng.randrange(2000, 5000, 100)), "per": "1d"}]}
                  for number in range(teams)]
    made_keys = []
    for number in range(keys):
        fields = {"name": f"{prefix}key{number}", "on_exhausted": rng.choice(["refuse", "answer"]),
                  "budgets": [{"amount": float(rng.randrange(800, 2500, 50)), "per": rng.choice(["1h", "1d"])}]}
        if made_teams and rng.random() < 0.8:
            fields["team"] = rng.choice(made_teams)["name"]
        if rng.random() < 0.3:
            fields["scope_budget"] = float(rng.randrange(400, 1200, 50))
        made_keys.append(fields)
    return made_teams, made_keys


# ------------------------------------------------------------------------------------------ the tests


@pytest.mark.parametrize("seed", range(2))
def test_keys_and_teams_made_on_one_proxy_work_on_the_others_at_once(seed, fleet, upstream):
    rng = random.Random(seed)
    proxies = fleet(3)
    teams, keys = _family(rng, teams=2, keys=5, prefix=f"m{seed}")
    for team in teams:
        maker = rng.choice(proxies)
        _make(maker, "teams", **team)
        for other in proxies:
            shown = _admin(other, "GET", f"teams/{team['name']}")
            assert shown.status_code == 200 and shown.json()["budgets"] == team["budgets"], shown.text
    for fields in keys:
        maker = rng.choice(proxies)
        secret = _make(maker, "keys", **fields)["key"]
        for other in proxies:  # at once: the next request, on any proxy, is the key's
            response = call(other, secret, fields["name"], f"first-{other.name}", cap=rng.choice([None, 50]))
            assert response.status_code == 200 and "x-bamasc-exhausted" not in response.headers, response.text
            shown = _admin(other, "GET", f"keys/{fields['name']}").json()
            assert {field: shown[field] for field in fields} == fields
            assert shown["windows"][0]["charged"] > 0 and shown["windows"][0]["held"] == 0
        # A name is one key across the fleet, whichever proxy is asked.
        again = _admin(rng.choice([proxy for proxy in proxies if proxy is not maker]), "POST", "keys", fields)
        assert again.status_code == 409, again.text


@pytest.mark.parametrize("seed", range(2))
def test_a_key_deleted_on_one_proxy_is_refused_by_the_others_on_its_next_request(seed, fleet, upstream):
    rng = random.Random(100 + seed)
    proxies = fleet(3)
    teams, keys = _family(rng, teams=1, keys=4, prefix=f"d{seed}")
    _make(proxies[0], "teams", **teams[0])
    secrets = {fields["name"]: _make(rng.choice(proxies), "keys", **fields)["key"] for fields in keys}
    for name, secret in secrets.items():
        user, deleter = rng.sample(proxies, 2)
        assert call(user, secret, name, "before").status_code == 200
        assert _admin(deleter, "DELETE", f"keys/{name}").status_code == 200
        forwarded = len(upstream.calls)
        for proxy in proxies:
            response = call(proxy, secret, name, "after")
            assert response.status_code == 401, response.text
            assert _admin(proxy, "GET", f"keys/{name}").status_code == 404
        assert len(upstream.calls) == forwarded
    # The team was held by its keys on every proxy; once they are gone any proxy deletes it.
    assert _admin(rng.choice(proxies), "DELETE", f"teams/{teams[0]['name']}").status_code == 200
    assert all(_admin(proxy, "GET", f"teams/{teams[0]['name']}").status_code == 404 for proxy in proxies)


@pytest.mark.parametrize("seed", range(3))
def test_key_and_team_windows_hold_across_proxies_under_concurrent_clients(seed, fleet, upstream):
    rng = random.Random(200 + seed)
    proxies = fleet(3)
    teams, keys = _family(rng, teams=2, keys=rng.randint(6, 9), prefix=f"w{seed}")
    for team in teams:
        _make(rng.choice(proxies), "teams", **team)
    secrets = {fields["name"]: _make(rng.choice(proxies), "keys", **fields)["key"] for fields in keys}
    # Three clients per key, all at once, each calling one after another on any proxy, in any of six scopes.
    clients = [[(rng.choice(proxies), fields["name"], f"s{rng.randrange(6)}", rng.choice([40, 120, 250, None]))
                for _ in range(rng.randint(5, 8))] for fields in keys for _ in range(3)]

    async def load():
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=len(clients))) as client:
            async def one_client(jobs):
                return [await acall(client, proxy, secrets[name], name, scope, cap) for proxy, name, scope, cap in jobs]

            return [outcome for outcomes in await asyncio.gather(*map(one_client, clients)) for outcome in outcomes]

    before, start = len(upstream.calls), time.time()
    outcomes = asyncio.run(load())
    end = time.time()
    assert {status for status, _ in outcomes} <= {200, 402}, outcomes
    billed = billed_per_key(upstream, before)
    by_team: dict[str, float] = {}
    for fields in keys:
        window = fields["budgets"][0]
        spent = billed.get(fields["name"], 0.0)
        assert spent <= window["amount"] * windows_touched(window["per"], start, end) + SLACK, (fields, spent)
        if "team" in fields:
            by_team[fields["team"]] = by_team.get(fields["team"], 0.0) + spent
    for team in teams:
        window = team["budgets"][0]
        assert by_team.get(team["name"], 0.0) <= window["amount"] * windows_touched("1d", start, end) + SLACK, \
            (team, by_team)
    # The windows bound: calls were ended by a key's window and by a team's, refused (402) or answered (200).
    ended = [text for _, text in outcomes if text]
    assert any("key '" in text for text in ended) and any("team '" in text for text in ended), ended
    assert max(billed.get(fields["name"], 0.0) / fields["budgets"][0]["amount"] for fields in keys) > 0.8
    assert max(by_team.get(team["name"], 0.0) / team["budgets"][0]["amount"] for team in teams) > 0.8
    assert sum(not text for _, text in outcomes) >= len(keys)  # and every key was served
    # Every proxy shows each window as the upstream billed it, nothing left held.
    if all(windows_touched(per, start, time.time()) == 1 for per in ("1h", "1d")):
        for fields in keys:
            [shown] = _admin(rng.choice(proxies), "GET", f"keys/{fields['name']}").json()["windows"]
            assert shown["held"] == 0 and shown["charged"] == pytest.approx(billed.get(fields["name"], 0.0))
        for team in teams:
            [shown] = _admin(rng.choice(proxies), "GET", f"teams/{team['name']}").json()["windows"]
            assert shown["held"] == 0 and shown["charged"] == pytest.approx(by_team.get(team["name"], 0.0))


@pytest.mark.parametrize("seed", range(2))
def test_keys_and_their_spent_window_survive_a_proxy_killed_mid_load(seed, fleet, upstream):
    rng = random.Random(300 + seed)
    proxies = fleet(2)
    budget = float(rng.randrange(2500, 4000, 100))
    _make(proxies[0], "teams", name="crew", budgets=[{"amount": 100_000.0, "per": "1d"}])
    secret = _make(rng.choice(proxies), "keys", name="survivor", team="crew",
                   budgets=[{"amount": budget, "per": "1d"}])["key"]
    victim = rng.randrange(2)
    jobs = [(proxies[number % 2], f"s{number}", 100) for number in range(8)]  # about half the window
    answered_before_kill = rng.randrange(len(jobs))

    async def load_and_kill():
        async with httpx.AsyncClient(timeout=60) as client:
            # A call the upstream never answers, in flight on the victim when it dies: its hold is never settled.
            hung = asyncio.ensure_future(acall(client, proxies[victim], secret, "survivor", "hung", 100,
                                               model=MODEL + "-hang"))
            for _ in range(3000):  # until its hold is in the ledger, as the other proxy sees it
                shown = await client.get(f"{proxies[1 - victim].url}/v1/admin/keys/survivor",
                                         headers={"authorization": f"Bearer {ADMIN}"})
                if shown.json()["windows"][0]["held"] > 0:
                    break
                await asyncio.sleep(0.01)
            pending = [asyncio.ensure_future(acall(client, proxy, secret, "survivor", scope, cap))
                       for proxy, scope, cap in jobs]
            outcomes = []
            if answered_before_kill == 0:
                proxies[victim].kill9()
            for finished in asyncio.as_completed(pending):
                outcomes.append(await finished)
                if len(outcomes) == answered_before_kill:
                    proxies[victim].kill9()
            return outcomes, await hung

    before, start = len(upstream.calls), time.time()
    outcomes, hung = asyncio.run(load_and_kill())
    assert hung == (0, "gone") and {status for status, _ in outcomes} <= {200, 0}, outcomes
    proxies[victim] = fleet(join=True)[0]  # restarted, joining the ledger
    restarted = proxies[victim]
    # The key is still the key on the restarted proxy, and its window still holds what was spent, with the hold of
    # every call the killed proxy had in flight (kept, as spent: the hung one at least).
    [shown] = _admin(restarted, "GET", "keys/survivor").json()["windows"]
    assert shown["held"] > 0
    assert shown["charged"] + shown["held"] >= billed_per_key(upstream, before).get("survivor", 0.0) - SLACK
    assert call(restarted, secret, "survivor", "after-restart").status_code == 200
    # Spent out on both proxies: the window's bill stays within its budget, and every proxy refuses it after.
    refused = None
    for number in range(60):
        response = call(proxies[number % 2], secret, "survivor", f"more{number}", cap=rng.choice([100, 200]))
        if response.status_code != 200:
            refused = response
            break
    end = time.time()
    assert refused is not None and refused.status_code == 402, refused
    billed = billed_per_key(upstream, before)["survivor"]
    assert billed <= budget * windows_touched("1d", start, end) + SLACK, (budget, billed)
    if windows_touched("1d", start, end) == 1:
        assert "key 'survivor'" in refused.json()["error"]["message"]
        forwarded = len(upstream.calls)
        for proxy in proxies:
            assert call(proxy, secret, "survivor", "fresh-scope").status_code == 402
        assert len(upstream.calls) == forwarded


def _flush_under(fleet, upstream, redis_server) -> tuple[list[tuple[str, str, int]], int]:
    """Three proxies serve a family of keys (refusing and answering), then Redis is flushed: each key's next call
    on each proxy; (key, proxy, status) for each, and the calls the upstream got after the flush."""
    rng = random.Random(400)
    proxies = fleet(3)
    teams, keys = _family(rng, teams=1, keys=3, prefix="f")
    _make(proxies[0], "teams", **teams[0])
    secrets = {fields["name"]: _make(rng.choice(proxies), "keys", **fields)["key"] for fields in keys}
    assert {fields["on_exhausted"] for fields in keys} == {"refuse", "answer"}
    for name, secret in secrets.items():
        assert all(call(proxy, secret, name, "warm").status_code == 200 for proxy in proxies)
    redis_server.flushall()
    forwarded = len(upstream.calls)
    statuses = [(name, proxy.name, call(proxy, secret, name, "after-flush").status_code)
                for name, secret in secrets.items() for proxy in proxies]
    return statuses, len(upstream.calls) - forwarded


def test_after_a_flushall_no_proxy_forwards_a_keyed_clients_call(fleet, upstream, redis_server):
    statuses, forwarded = _flush_under(fleet, upstream, redis_server)
    assert forwarded == 0 and all(status >= 400 for _, _, status in statuses), statuses


def test_after_a_flushall_every_proxy_answers_503_to_a_keyed_client(fleet, upstream, redis_server):
    statuses, _ = _flush_under(fleet, upstream, redis_server)
    # An answering key too: a lost ledger is no spent budget; and a client told 401 would think its key revoked.
    assert all(status == 503 for _, _, status in statuses), statuses
