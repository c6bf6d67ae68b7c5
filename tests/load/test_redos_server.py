"""A catastrophic path pattern, served by gunicorn: every request is answered.

One sync worker serves a policy whose pattern ``^/(\\w+-?)*$`` costs Python's
backtracking ``re`` 2**(n-1) steps on n word characters followed by what it
cannot match: a 42-character path held such a worker until gunicorn killed it.
Here each request must be answered, by the same worker process. No duration
is asserted: a backtracking matcher would need years for these paths, so an
answer at all (within ``REQUEST_TIMEOUT``, below gunicorn's 30 s worker
timeout) holds at any machine speed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devtools.redis_harness import RedisServer
from tests.load.live import Reply, Site, access_statuses, gunicorn_site, new_source

pytestmark = pytest.mark.slow

LIMIT = 2
PATTERN = r"^/(\w+-?)*$"
POLICY = {"name": "redos", "rates": f"{LIMIT}/h", "algorithm": "sliding_log", "path": PATTERN}
# tests/urls.py serves paths of word characters and hyphens ending in one ("/a-b-").
ADVERSARIAL = ["/" + "a" * 39 + "--", "/" + "a" * 4997 + "--"]  # 42 and 5,000 characters
MATCHING = "/" + "ab-" * 1666  # 4,999 characters that the pattern matches


@pytest.fixture(scope="module")
def site(redis_standalone: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    workdir = tmp_path_factory.mktemp("redos")
    # One worker, so that a killed one would show as a new pid; request lines of 5,000
    # characters are past gunicorn's default limit (4,094).
    options = ("--limit-request-line", "8190")
    with gunicorn_site(redis_standalone, workdir, [POLICY], workers=1, options=options) as served:
        yield served
    assert "WORKER TIMEOUT" not in served.log.read_text()
    assert "500" not in access_statuses(workdir)


def _policies(reply: Reply) -> str:
    return reply.headers.get("ratelimit-policy", "")


def test_adversarial_paths_are_answered_by_the_worker_that_took_them(site: Site) -> None:
    source = new_source()
    first = site.get("/health-", source=source)  # matched: the first of LIMIT requests
    assert first.status == 200 and '"redos"' in _policies(first)
    for path in ADVERSARIAL:
        assert len(path) in (42, 5000)
        reply = site.get(path, source=source)
        # The pattern does not match them: the policy does not apply, the view answers.
        assert reply.status == 200, path
        assert '"redos"' not in _policies(reply)
        assert reply.worker == first.worker
    # Where the pattern matches, even on 5,000 characters, the policy is enforced:
    # the rest of the limit passes, then a 429.
    replies = [site.get(MATCHING, source=source) for _ in range(LIMIT)]
    assert [r.status for r in replies] == [200] * (LIMIT - 1) + [429]
    assert {r.worker for r in replies} == {first.worker}
