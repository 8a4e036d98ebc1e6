"""Specification of the webhook primitives: the Quire-Signature header and its check, the callback URLs Quire
refuses to call, and the backoff between attempts."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime

import pytest

from pipeline.webhooks import (
    CallbackRefused,
    HostNotFound,
    check_url,
    post,
    refusal,
    retry_after_seconds,
    retry_delay,
    sign,
    verify,
)
from tests.receiver import receiver

SECRET = "whsec_test"
BODY = b'{"id":"d1","type":"document.succeeded"}'
NOW = 1_800_000_000


def test_the_signature_is_the_hmac_of_timestamp_dot_body_under_the_secret():
    expected = hmac.new(SECRET.encode(), f"{NOW}.".encode() + BODY, hashlib.sha256).hexdigest()
    assert sign(SECRET, BODY, NOW) == f"t={NOW},v1={expected}"


def test_a_signature_verifies_with_the_same_secret_and_body_within_the_tolerance():
    header = sign(SECRET, BODY, NOW)
    assert verify(SECRET, header, BODY, now=NOW)
    assert verify(SECRET, header, BODY, tolerance_s=300, now=NOW + 300)


@pytest.mark.parametrize("secret, body, now", [
    ("another secret", BODY, NOW),  # signed by someone else
    (SECRET, BODY.replace(b"succeeded", b"failed"), NOW),  # the body was altered on the way
    (SECRET, BODY + b" ", NOW),  # even by a byte
    (SECRET, BODY, NOW + 301),  # replayed after the tolerance
    (SECRET, BODY, NOW - 301),  # or from the future
])
def test_a_wrong_secret_a_tampered_body_or_an_old_timestamp_does_not_verify(secret, body, now):
    assert not verify(secret, sign(SECRET, BODY, NOW), body, now=now)


@pytest.mark.parametrize("header", ["", "garbage", f"v1={'0' * 64}", f"t=abc,v1={'0' * 64}", f"t={NOW}"])
def test_a_malformed_header_does_not_verify(header):
    assert not verify(SECRET, header, BODY, now=NOW)


def test_any_of_several_v1_signatures_may_match_while_a_secret_is_rotated():
    old = sign("old secret", BODY, NOW).split(",")[1]
    assert verify(SECRET, f"{sign(SECRET, BODY, NOW)},{old}", BODY, now=NOW)
    assert verify("old secret", f"{sign(SECRET, BODY, NOW)},{old}", BODY, now=NOW)


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:9/", "http://127.8.9.10/", "http://[::1]/",  # loopback
    "http://10.1.2.3/", "http://172.16.0.1/", "http://192.168.1.1/", "http://[fd12:3456::1]/",  # private, ULA
    "http://169.254.10.10/", "http://[fe80::1]/",  # link-local
    "http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/", "http://100.100.100.200/",  # metadata
    "http://100.64.0.1/", "http://100.127.255.254/",  # CGNAT
    "http://224.0.0.1/", "http://[ff02::1]/",  # multicast
    "http://0.0.0.0/", "http://[::]/",  # unspecified
    "http://240.0.0.1/", "http://255.255.255.255/", "http://192.0.2.1/",  # reserved, broadcast, documentation
    "http://[::ffff:127.0.0.1]/", "http://[::ffff:169.254.169.254]/",  # IPv4-mapped
    "http://[2002:7f00:1::]/", "http://[2002:a9fe:a9fe::]/",  # 6to4 carrying 127.0.0.1, 169.254.169.254
    "http://localhost:8080/hook",  # a name that resolves to loopback
])
def test_callback_urls_into_the_service_s_own_network_are_refused(url):
    with pytest.raises(CallbackRefused) as refused:
        check_url(url)
    assert refused.value.code == "callback_url_refused"
    assert "QUIRE_WEBHOOK_ALLOW" in str(refused.value)


@pytest.mark.parametrize("url", ["ftp://example.com/", "file:///etc/passwd", "gopher://1.1.1.1/", "/relative",
                                 "http://", "http://1.1.1.1:99999/"])
def test_only_absolute_http_and_https_urls_are_accepted(url):
    with pytest.raises(CallbackRefused):
        check_url(url)


def test_public_addresses_pass_and_are_returned_for_the_request():
    assert [str(a) for a in check_url("https://1.1.1.1/hook")] == ["1.1.1.1"]
    assert [str(a) for a in check_url("http://[2606:4700::1111]:8080/")] == ["2606:4700::1111"]


def test_every_address_a_name_resolves_to_must_pass():
    def resolve(host: str, port: int) -> list[str]:
        assert (host, port) == ("hooks.example.com", 443)
        return ["93.184.216.34", "10.0.0.7"]  # one public, one private: a rebinding trick

    with pytest.raises(CallbackRefused, match="10.0.0.7"):
        check_url("https://Hooks.Example.com./x", resolve=resolve)
    assert check_url("https://hooks.example.com/x", resolve=lambda host, port: ["93.184.216.34"])


def test_a_name_that_does_not_resolve_is_refused_as_host_not_found():
    with pytest.raises(HostNotFound):
        check_url("http://no-such-host.invalid/")


def test_the_allow_list_permits_addresses_networks_and_names():
    assert check_url("http://127.0.0.1:9/", allow=["127.0.0.1"])
    assert check_url("http://[::ffff:127.0.0.1]/", allow=["127.0.0.1"])  # the mapped form of an allowed address
    assert check_url("http://10.20.30.40/", allow=["10.0.0.0/8"])
    assert check_url("http://localhost:9/", allow=["LOCALHOST"])
    with pytest.raises(CallbackRefused):
        check_url("http://127.0.0.2/", allow=["127.0.0.1", "10.0.0.0/8", "example.com"])


def test_a_metadata_address_needs_an_allow_list_entry_naming_it_not_a_network_around_it():
    with pytest.raises(CallbackRefused, match="metadata"):
        check_url("http://169.254.169.254/", allow=["169.254.0.0/16"])
    assert check_url("http://169.254.169.254/", allow=["169.254.169.254"])


def test_refusal_names_the_range():
    from ipaddress import ip_address

    assert refusal(ip_address("127.0.0.1")) == "a loopback address"
    assert refusal(ip_address("169.254.169.254")) == "a cloud metadata address"
    assert refusal(ip_address("100.64.1.1")) == "a CGNAT (100.64/10) address"
    assert refusal(ip_address("8.8.8.8")) is None


def test_backoff_doubles_from_the_base_up_to_the_cap_with_full_jitter():
    most = [retry_delay(n, base_s=2.0, cap_s=60.0, rng=lambda: 1.0) for n in range(1, 8)]
    assert most == [2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
    assert retry_delay(3, base_s=2.0, cap_s=60.0, rng=lambda: 0.25) == 2.0
    assert retry_delay(3, base_s=2.0, cap_s=60.0, rng=lambda: 0.0) == 0.0
    assert all(0.0 <= retry_delay(5, 2.0, 60.0) <= 32.0 for _ in range(100))


def test_a_2xx_is_a_success_and_the_request_carries_the_headers_and_body():
    with receiver(204) as hooks:
        outcome = post(hooks.url, BODY, {"Quire-Event": "document.succeeded"}, ["127.0.0.1"], timeout_s=5)
        (got,) = hooks.wait_for(1)
    assert (outcome.succeeded, outcome.status_code, outcome.error, outcome.retry) == (True, 204, None, False)
    assert got.body == BODY and got.path == "/hooks" and got.headers["quire-event"] == "document.succeeded"


@pytest.mark.parametrize("status, retry", [(500, True), (503, True), (408, True), (429, True),
                                           (400, False), (404, False), (410, False), (301, False)])
def test_5xx_408_and_429_are_retried_other_answers_are_final_and_redirects_are_not_followed(status, retry):
    with receiver(status) as hooks:
        outcome = post(hooks.url, BODY, {}, ["127.0.0.1"], timeout_s=5)
        assert len(hooks.wait_for(1)) == 1
    assert (outcome.succeeded, outcome.status_code, outcome.error, outcome.retry) == (
        False, status, f"HTTP {status}", retry)


@pytest.mark.parametrize("status, asked", [(429, 7.0), (503, 7.0), (500, None)])
def test_a_429_or_503_carries_the_wait_its_retry_after_asks_for(status, asked):
    with receiver(status, retry_after="7") as hooks:
        outcome = post(hooks.url, BODY, {}, ["127.0.0.1"], timeout_s=5)
    assert (outcome.retry, outcome.retry_after_s) == (True, asked)


def test_retry_after_is_delta_seconds_or_an_http_date():
    now = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)
    assert retry_after_seconds("120", now) == 120.0
    assert retry_after_seconds("Thu, 03 Dec 2026 12:01:30 GMT", now) == 90.0
    assert retry_after_seconds("Thu, 03 Dec 2026 11:00:00 GMT", now) == 0.0  # a date past is "now"
    assert [retry_after_seconds(value, now) for value in (None, "", "soon", "-5", "1.5")] == [None] * 5


def test_no_answer_is_retried():
    with receiver() as hooks:
        url = hooks.url
    outcome = post(url, BODY, {}, ["127.0.0.1"], timeout_s=5)  # the receiver has gone: connection refused
    assert (outcome.succeeded, outcome.status_code, outcome.retry) == (False, None, True)
    assert outcome.error and outcome.error.startswith("ConnectError")


def test_a_refused_url_is_not_called_and_not_retried():
    with receiver() as hooks:
        outcome = post(hooks.url, BODY, {}, allow=[], timeout_s=5)
        assert hooks.received == []
    assert (outcome.succeeded, outcome.status_code, outcome.retry) == (False, None, False)
    assert outcome.error and outcome.error.startswith("callback_url_refused: ")


def test_the_request_goes_to_the_checked_address_and_still_names_the_host():
    with receiver() as hooks:
        url = hooks.url.replace("127.0.0.1", "localhost")
        assert post(url, BODY, {}, ["localhost"], timeout_s=5).succeeded
        (got,) = hooks.wait_for(1)
    assert got.headers["host"] == url.split("/")[2]


def test_a_host_that_does_not_resolve_is_retried_dns_may_recover():
    outcome = post("http://hooks.invalid/quire", BODY, {}, allow=[], timeout_s=5)
    assert (outcome.succeeded, outcome.status_code, outcome.retry) == (False, None, True)
    assert outcome.error and "does not resolve" in outcome.error
