"""A 405's `Allow` header reads the same whatever order the route's set of methods iterates in."""

import itertools

from starlette.exceptions import HTTPException

from bamasc.http.requests import routing_headers


def test_allow_lists_the_methods_in_one_order_however_they_came():
    methods = ["GET", "HEAD", "POST"]
    seen = {routing_headers(HTTPException(405, headers={"Allow": ", ".join(order)}))["Allow"]
            for order in itertools.permutations(methods)}
    assert seen == {"GET, HEAD, POST"}


def test_a_404_without_headers_gets_none():
    assert routing_headers(HTTPException(404)) == {}
