"""Webhooks reach only the outside world (issue 23): URLs whose host is, or resolves to, a loopback, private,
link-local, multicast, unspecified or reserved address are refused when saved (400 naming `url`) and at delivery,
where the name is resolved once and the connection goes to the checked address (a DNS answer that changes in
between reaches nothing). CLEAR_WEBHOOK_ALLOW_PRIVATE lets loopback and private addresses through; no response body
from a non-public address is ever kept."""

import ipaddress
import logging
import shutil
import socket
import ssl
import subprocess
from collections import Counter

import pytest
from rest_framework.test import APIClient

from clear.outbound import policy
from clear.webhooks.errors import WebhookTargetRefusedError
from clear.webhooks.models import Webhook, WebhookDelivery
from clear.webhooks.services import webhook_create, webhook_delivery_attempt, webhook_event_emit
from clear.webhooks.targets import webhook_address_kind
from tests.api.test_webhooks import Receiver, _signature_ok

pytestmark = pytest.mark.django_db

HOST = "hooks.example.test"
PUBLIC = "93.184.216.34"
REFUSED_URLS = [
    "http://127.0.0.1:8200/admin/",
    "http://[::1]:8200/admin/",
    "http://169.254.169.254/latest/meta-data/",
    "http://10.0.0.1/hook",
    "http://localhost:8200/admin/",
    "http://admin.localhost/x",
    "http://[::ffff:127.0.0.1]/x",  # IPv4-mapped
    "http://[::ffff:a9fe:a9fe]/x",  # 169.254.169.254, mapped and spelt in hex
    "http://[64:ff9b::7f00:1]/x",  # NAT64 of 127.0.0.1
    "http://[2002:c0a8:101::1]/x",  # 6to4 of 192.168.1.1
    "http://0.0.0.0:8200/",
    "http://[::]:8200/",
    "http://192.168.1.1/",
    "http://172.16.0.1/",
    "http://100.64.0.1/",  # carrier-grade NAT
    "http://224.0.0.1/",
    "http://240.0.0.1/",
    "http://[fe80::1]/",
    "http://[fc00::1]/",
    "https://127.0.0.1/",
]
# What Django's URL validation refuses anyway, but the service must not take either (other callers, old rows).
NUMERIC_SPELLINGS = ["http://2130706433/", "http://0x7f000001/", "http://0177.0.0.1/", "http://0x7f.0.0.1/",
                     "http://127.1/", "http://0251.0376.0251.0376/", "http://localhost./"]


class Resolver:
    """Stands in for socket.getaddrinfo: `answers[name]` are the addresses the name resolves to, call after call
    (the last repeats); other names resolve as usual, so connections to addresses still work."""

    def __init__(self, monkeypatch, answers: dict[str, list[str]]):
        self.answers = answers
        self.calls: Counter = Counter()
        self.real = socket.getaddrinfo
        monkeypatch.setattr(socket, "getaddrinfo", self)

    def __call__(self, host, port, family=0, type=0, proto=0, flags=0):
        if host not in self.answers:
            return self.real(host, port, family, type, proto, flags)
        self.calls[host] += 1
        answers = self.answers[host]
        address = answers[min(self.calls[host], len(answers)) - 1]
        if address is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        if ":" in address:
            return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, port, 0, 0))]
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]


@pytest.fixture
def client(issued_key):
    return APIClient(HTTP_AUTHORIZATION=f"Bearer {issued_key.secret}")


def _refused(response) -> dict:
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] in ("webhook_target_refused", "invalid") and "url" in body["extra"]["fields"]
    assert body["message"].startswith("url:")
    return body


@pytest.mark.parametrize("url", REFUSED_URLS)
def test_a_non_public_url_is_refused_at_creation(client, url):
    body = _refused(client.post("/api/v1/webhooks/", {"url": url, "events": ["insight.created"]}, format="json"))
    assert body["code"] == "webhook_target_refused" and "public addresses" in body["message"]
    assert not Webhook.objects.exists()


@pytest.mark.parametrize("url", REFUSED_URLS + NUMERIC_SPELLINGS)
def test_a_non_public_url_is_refused_on_update(client, monkeypatch, url):
    Resolver(monkeypatch, {HOST: [PUBLIC]})
    webhook = client.post("/api/v1/webhooks/", {"url": f"https://{HOST}/hook", "events": ["insight.created"]},
                          format="json").json()
    _refused(client.patch(f"/api/v1/webhooks/{webhook['id']}/", {"url": url}, format="json"))
    assert Webhook.objects.get(pk=webhook["id"]).url == f"https://{HOST}/hook"


@pytest.mark.parametrize("url", NUMERIC_SPELLINGS)
def test_decimal_octal_and_hex_spellings_are_refused_by_the_service(project, url):
    with pytest.raises(WebhookTargetRefusedError, match="not a public address|non-public address"):
        webhook_create(project=project, url=url, events=["insight.created"])


def test_a_name_resolving_to_loopback_is_refused_at_creation_without_naming_the_address(client, monkeypatch):
    Resolver(monkeypatch, {HOST: ["10.1.2.3"]})
    body = _refused(client.post("/api/v1/webhooks/", {"url": f"http://{HOST}/x", "events": ["insight.created"]},
                                format="json"))
    assert f"{HOST} resolves to a non-public address (private)" in body["message"]
    assert "10.1.2.3" not in body["message"]  # internal DNS answers are not the key holder's to learn


@pytest.mark.parametrize("address, kind", [
    ("127.0.0.1", "loopback"), ("127.255.0.9", "loopback"), ("::1", "loopback"), ("::ffff:127.0.0.1", "loopback"),
    ("169.254.169.254", "link-local"), ("fe80::1", "link-local"), ("::ffff:169.254.169.254", "link-local"),
    ("10.0.0.1", "private"), ("172.31.255.255", "private"), ("192.168.0.1", "private"), ("fd12:3456::1", "private"),
    ("100.64.0.1", "private"), ("fec0::1", "private"), ("192.0.2.1", "private"), ("2001:db8::1", "private"),
    ("0.0.0.0", "unspecified"), ("0.1.2.3", "unspecified"), ("::", "unspecified"), ("224.0.0.251", "multicast"),
    ("ff02::1", "multicast"), ("239.255.255.250", "multicast"), ("240.0.0.1", "reserved"),
    ("255.255.255.255", "reserved"), ("::127.0.0.1", "reserved"), ("64:ff9b::a00:1", "private"),
    ("2002:7f00:1::1", "loopback"),
    (PUBLIC, None), ("8.8.8.8", None), ("2606:4700:4700::1111", None), (f"::ffff:{PUBLIC}", None),
    ("64:ff9b::5db8:d822", None), ("2002:5db8:d822::1", None),
])
def test_address_kinds(address, kind):
    assert webhook_address_kind(address=ipaddress.ip_address(address)) == kind


def test_a_name_that_rebinds_to_loopback_is_refused_at_delivery_and_nothing_connects(
        client, project, monkeypatch, caplog, django_capture_on_commit_callbacks):
    with Receiver() as receiver:
        resolver = Resolver(monkeypatch, {HOST: [PUBLIC, "127.0.0.1"]})  # public when saved, loopback after
        webhook = client.post("/api/v1/webhooks/", {"url": f"http://{HOST}:{receiver.port}/admin/",
                                                    "events": ["insight.created"]}, format="json")
        assert webhook.status_code == 201, webhook.content
        url = f"/api/v1/webhooks/{webhook.json()['id']}/"
        with caplog.at_level(logging.WARNING, logger="clear.webhooks.services"):
            with django_capture_on_commit_callbacks(execute=True):
                assert client.post(url + "ping/").status_code == 202
        [delivery] = client.get(url + "deliveries/").json()["results"]
        # Failed for good after one attempt: no retry would make the address acceptable.
        assert (delivery["status"], delivery["attempts"], delivery["response_code"]) == ("failed", 1, None)
        assert delivery["response_body"] == "" and delivery["next_attempt_at"] is None
        assert delivery["error"].startswith("TargetRefused: ") and "non-public address (loopback)" in delivery["error"]
        assert "127.0.0.1" not in delivery["error"]
        assert webhook_delivery_attempt(delivery_id=delivery["id"]) is None  # a late message does nothing
        assert receiver.connections == 0 and receiver.requests == []
    assert resolver.calls[HOST] == 2  # once when saved, once for the one attempt
    [record] = [r for r in caplog.records if "webhooks.refused" in r.getMessage()]
    assert "127.0.0.1" in record.getMessage()  # the operator's log has the address
    assert WebhookDelivery.objects.get(pk=delivery["id"]).attempts == 1


def test_old_rows_pointing_inside_are_refused_at_delivery(project):
    webhook = Webhook.objects.create(project=project, url="http://169.254.169.254/latest/", secret="s" * 20,
                                     events=["insight.created"])
    [delivery] = webhook_event_emit(project=project, event="insight.created", payload={})
    assert webhook_delivery_attempt(delivery_id=delivery.pk) is None
    delivery.refresh_from_db()
    assert delivery.status == "failed" and "(link-local)" in delivery.error and delivery.response_body == ""
    assert webhook.deliveries.count() == 1


def test_a_delivery_connects_to_the_address_it_checked(project, settings, monkeypatch):
    """Pinning: the name is resolved once per attempt, and the request goes to that answer even though every later
    lookup would say something else; the Host header keeps the name."""
    settings.CLEAR_WEBHOOK_ALLOW_PRIVATE = True
    with Receiver() as receiver:
        resolver = Resolver(monkeypatch, {HOST: ["127.0.0.1", "192.0.2.1"]})
        webhook = Webhook.objects.create(project=project, url=f"http://{HOST}:{receiver.port}/in?x=1",
                                         secret="s" * 20, events=["insight.created"])
        [delivery] = webhook_event_emit(project=project, event="insight.created", payload={"n": 1})
        assert webhook_delivery_attempt(delivery_id=delivery.pk) is None
    assert resolver.calls[HOST] == 1
    [request] = receiver.requests
    assert request["headers"]["Host"] == f"{HOST}:{receiver.port}"
    assert _signature_ok(request, webhook.secret)
    delivery.refresh_from_db()
    assert (delivery.status, delivery.response_code, delivery.response_body) == ("delivered", 200, "")


def test_allow_private_lets_loopback_and_private_through_but_not_link_local(client, settings):
    settings.CLEAR_WEBHOOK_ALLOW_PRIVATE = True
    for url in ("http://127.0.0.1:8200/", "http://10.0.0.1/", "http://localhost/", "http://[::1]/",
                "http://[fd00::1]/"):
        response = client.post("/api/v1/webhooks/", {"url": url, "events": ["insight.created"]}, format="json")
        assert response.status_code == 201, (url, response.content)
    for url in ("http://169.254.169.254/", "http://[fe80::1]/", "http://224.0.0.1/", "http://0.0.0.0/",
                "http://240.0.0.1/"):
        body = _refused(client.post("/api/v1/webhooks/", {"url": url, "events": ["insight.created"]}, format="json"))
        assert "CLEAR_WEBHOOK_ALLOW_PRIVATE" not in body["message"]  # no setting allows these


def test_a_name_that_does_not_resolve_is_accepted_and_retried_at_delivery(project, monkeypatch):
    Resolver(monkeypatch, {HOST: [None]})
    webhook_create(project=project, url=f"https://{HOST}/hook", events=["insight.created"])
    [delivery] = webhook_event_emit(project=project, event="insight.created", payload={})
    assert webhook_delivery_attempt(delivery_id=delivery.pk) is not None  # a retry is planned
    delivery.refresh_from_db()
    assert delivery.status == "pending" and delivery.error.startswith("NameResolutionError: ")


def test_redirects_are_recorded_not_followed(project, settings):
    settings.CLEAR_WEBHOOK_ALLOW_PRIVATE = True
    settings.CLEAR_WEBHOOK_MAX_ATTEMPTS = 1
    with Receiver() as inside, Receiver(statuses=[307], location=inside.url) as redirecting:
        webhook_create(project=project, url=redirecting.url, events=["insight.created"])
        [delivery] = webhook_event_emit(project=project, event="insight.created", payload={})
        webhook_delivery_attempt(delivery_id=delivery.pk)
    assert len(redirecting.requests) == 1 and inside.connections == 0
    delivery.refresh_from_db()
    assert (delivery.status, delivery.response_code) == ("failed", 307)


def test_only_a_public_address_answer_is_kept_and_only_its_first_kilobyte(project, settings, monkeypatch):
    """The Receiver stands in for a public receiver: the classification is told 127.0.0.1 is public."""
    real = policy.outbound_address_kind

    def loopback_counts_as_public(*, address):
        return None if address == ipaddress.ip_address("127.0.0.1") else real(address=address)

    # The one classification every outbound check and the pinned connection ask (clear/outbound/policy.py).
    monkeypatch.setattr(policy, "outbound_address_kind", loopback_counts_as_public)
    settings.CLEAR_WEBHOOK_MAX_ATTEMPTS = 1
    with Receiver(statuses=[500], body="é".encode() * 1500) as receiver:
        webhook_create(project=project, url=receiver.url, events=["insight.created"])
        [delivery] = webhook_event_emit(project=project, event="insight.created", payload={})
        webhook_delivery_attempt(delivery_id=delivery.pk)
    delivery.refresh_from_db()
    assert (delivery.status, delivery.response_code) == ("failed", 500)
    assert delivery.response_body == "é" * 512  # 1,024 bytes of a 3,000-byte body


def _certificates(tmp_path) -> tuple[str, str, str]:
    """A test CA and a certificate it issued for HOST: (CA file, certificate file, key file)."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")

    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=tmp_path, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=Clear test CA", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "leaf.key", "-out", "leaf.csr", "-subj", f"/CN={HOST}")
    (tmp_path / "leaf.ext").write_text(f"subjectAltName=DNS:{HOST}\nbasicConstraints=CA:FALSE\n"
                                       "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
                                       "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n")
    openssl("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "leaf.pem", "-days", "2", "-extfile", "leaf.ext")
    return str(tmp_path / "ca.pem"), str(tmp_path / "leaf.pem"), str(tmp_path / "leaf.key")


def test_https_is_pinned_with_sni_and_the_certificate_checked_against_the_name(project, settings, monkeypatch,
                                                                                tmp_path):
    ca, cert, key = _certificates(tmp_path)
    settings.CLEAR_WEBHOOK_ALLOW_PRIVATE = True
    settings.CLEAR_WEBHOOK_MAX_ATTEMPTS = 1
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", ca)
    server_names: list[str] = []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.sni_callback = lambda sock, name, ctx: server_names.append(name)
    with Receiver() as receiver:
        receiver.server.socket = context.wrap_socket(receiver.server.socket, server_side=True)
        Resolver(monkeypatch, {HOST: ["127.0.0.1"], "other.example.test": ["127.0.0.1"]})
        good = webhook_create(project=project, url=f"https://{HOST}:{receiver.port}/in", events=["insight.created"])
        wrong = webhook_create(project=project, url=f"https://other.example.test:{receiver.port}/in",
                               events=["insight.created"])
        deliveries = {d.webhook_id: d for d in webhook_event_emit(project=project, event="insight.created",
                                                                  payload={})}
        for delivery in deliveries.values():
            webhook_delivery_attempt(delivery_id=delivery.pk)
    ok, refused = (WebhookDelivery.objects.get(pk=deliveries[w.pk].pk) for w in (good, wrong))
    assert (ok.status, ok.response_code) == ("delivered", 200), ok.error
    assert [r["headers"]["Host"] for r in receiver.requests] == [f"{HOST}:{receiver.port}"]
    assert (refused.status, refused.response_code) == ("failed", None)
    assert refused.error.startswith("SSLError: ") and "other.example.test" in refused.error
    assert server_names == [HOST, "other.example.test"]
