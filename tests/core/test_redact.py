"""core.redact: credentials never shown, in a URL, a message, an error chain or a repr."""

from __future__ import annotations

import pickle
import subprocess
import traceback

import pytest
from helpers import run_python

import slipstream as ss
from slipstream.core import redact as redact_module
from slipstream.core.redact import RedactedError, redact, redact_url, remember, remember_options, scrubbed
from slipstream.remote.store import Store

SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCY@zz"  # with '/', '+' and '@', as secret keys and passwords have


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("s3://AKIAEXAMPLE:hunter2secret@bucket/train/", "s3://***@bucket/train/"),
        (f"https://user:{SECRET}@host.example/a/b.arrow", "https://***@host.example/a/b.arrow"),
        ("https://ghp_TOKEN1234@host.example/x", "https://***@host.example/x"),
        ("abfs://container@account.dfs.core.windows.net/train/", "abfs://container@account.dfs.core.windows.net/train/"),
        (
            "https://b.s3.amazonaws.com/k.arrow?X-Amz-Algorithm=AWS4&X-Amz-Credential=AKIA%2F1&X-Amz-Signature=abc123&versionId=7",
            "https://b.s3.amazonaws.com/k.arrow?X-Amz-Algorithm=AWS4&X-Amz-Credential=***&X-Amz-Signature=***&versionId=7",
        ),
        ("https://acct.blob.core.windows.net/c/x.arrow?sv=2022&sig=Zm9v%3D", "https://acct.blob.core.windows.net/c/x.arrow?sv=2022&sig=***"),
        ("s3://bucket/key@v1/x.arrow", "s3://bucket/key@v1/x.arrow"),
        ("https://host.example:8443/data/", "https://host.example:8443/data/"),
    ],
)
def test_a_url_shows_no_credentials(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert redact(f"reading {url}: failed") == f"reading {shown}: failed"


def test_a_remembered_secret_is_redacted_outside_any_url_too() -> None:
    remember("s3://AKIAREMEMBER:rememberedSecret99@bucket/x/")
    text = 'Invalid bucket name "AKIAREMEMBER:rememberedSecret99@bucket"'
    assert "rememberedSecret99" not in redact(text) and redact(text) == 'Invalid bucket name "***@bucket"'
    remember_options({"key": "AKIAOPTION", "secret": "optionSecret123", "client_kwargs": {"endpoint_url": "http://u:endpointSecret7@127.0.0.1:9"}})
    assert redact("optionSecret123 and endpointSecret7") == "*** and ***"


def test_an_azure_connection_string_and_its_account_key_are_redacted() -> None:
    connection = "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=azureAccountKey0==;EndpointSuffix=core.windows.net"
    remember_options({"connection_string": connection})
    assert redact(f"bad options: {connection}") == "bad options: ***"
    assert redact("signature made with azureAccountKey0==") == "signature made with ***"


def test_an_environment_secret_is_redacted_when_long_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "environmentSecret42")
    assert redact("signed with environmentSecret42") == "signed with ***"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")  # a word, not only a secret: left alone
    assert redact("testing") == "testing"


def test_an_error_chain_is_scrubbed_in_place_or_replaced() -> None:
    url = f"https://user:{SECRET}@host.example/x.arrow"

    class Custom(Exception):
        def __str__(self) -> str:
            return f"GET {url}"

    try:
        try:
            raise FileNotFoundError(2, "No such file", url)
        except FileNotFoundError as inner:
            raise Custom() from inner
    except Custom as outer:
        safe = scrubbed(outer)
    assert isinstance(safe, RedactedError) and str(safe) == "Custom: GET https://***@host.example/x.arrow"
    assert isinstance(safe.__cause__, FileNotFoundError)  # scrubbed in place: still itself
    shown = "".join(traceback.format_exception(safe))
    assert SECRET not in shown and "user:" not in shown and "https://***@host.example/x.arrow" in shown
    clean = ValueError("nothing secret")
    assert scrubbed(clean) is clean


def test_a_slipstream_error_never_shows_a_credential_and_pickles_so() -> None:
    error = ss.MissingShardError(f"https://user:{SECRET}@host.example/x.arrow", "no such object")
    assert str(error) == "https://***@host.example/x.arrow: no such object" and error.path == "https://***@host.example/x.arrow"
    again = pickle.loads(pickle.dumps(error))
    assert str(again) == str(error) and SECRET not in repr(again.__dict__)


def test_a_store_names_an_object_without_its_credentials_and_reads_the_real_url() -> None:
    store = Store(storage_options={"secret": "storeOptionSecret1"})
    url = f"https://user:{SECRET}@host.example/train/"
    name = store.name(url)
    assert name == "https://***@host.example/train/" and store.name("https://host.example/plain") == "https://host.example/plain"
    assert store._resolved(name) == url and store._resolved(name + "index.json") == url + "index.json"
    assert SECRET not in repr(store)
    with pytest.raises(ValueError, match="differ only in their credentials"):
        store.name("https://other:password9@host.example/train/")
    copy = pickle.loads(pickle.dumps(store))  # a worker process: the same names, the secrets remembered
    assert copy._resolved(name + "shard-00000.arrow") == url + "shard-00000.arrow"
    for form in ("s3://AKIAEXAMPLE:s3Secret55@bucket/train/", "gs://user:gsSecret55@bucket/x.arrow"):
        with pytest.raises(ValueError, match=r"://\*\*\*@bucket/.*cannot carry credentials.*storage_options") as caught:
            store.name(form)
        assert "Secret55" not in str(caught.value)


def test_the_secrets_are_held_once_each() -> None:
    remember("https://u:heldOnce123@h/x")
    remember("https://u:heldOnce123@h/y")
    assert sum(1 for s in redact_module._secrets if s == "heldOnce123") == 1


PLAIN = "wJalrXUtnFEMI9K7MDENGbPxRfiCYzz9"  # a password an HTTP client reads from either URL below (no '/')


def _everything(error: BaseException) -> str:
    return "".join(traceback.format_exception(error)) + repr(error) + repr(getattr(error, "__dict__", {}))


@pytest.mark.parametrize(
    "url",
    [
        f"http://reader@example.com:{PLAIN}@127.0.0.1:9/train/",  # an e-mail address as the user name
        f"http://reader:{PLAIN}'x@127.0.0.1:9/train/",  # a quote in the password
    ],
    ids=["email-user", "quote-in-password"],
)
def test_credentials_the_client_reads_from_a_url_are_never_shown(url: str, tmp_path) -> None:
    pytest.importorskip("aiohttp")
    assert PLAIN not in Store().name(url)  # the name every repr, path and error uses
    with pytest.raises(ss.RemoteReadError) as caught:  # nothing listens on port 9: refused at once
        ss.open(url, cache_dir=tmp_path, retry_budget=0.5, timeout=0.5)
    assert PLAIN not in _everything(caught.value), _everything(caught.value)[-400:]


_SLOW = {
    # a compact JSON list of URLs of an endpoint with a port (an index, a listing quoted in a message)
    "json_urls": "json.dumps([f'http://127.0.0.1:9000/bucket/shard-{i:05d}.arrow' for i in range(20000)], separators=(',', ':'))",
    # URLs joined by commas (the same, unquoted)
    "comma_urls": "','.join(f'http://127.0.0.1:9000/bucket/shard-{i:05d}.arrow' for i in range(20000))",
    # a long run of scheme characters (a base64/hex-ish blob with '-', '.' or '+') then a URL
    "scheme_chars": "'a-' * 500000 + ' s3://bucket/key'",
}


@pytest.mark.parametrize("text", list(_SLOW), ids=list(_SLOW))
def test_redact_of_a_megabyte_of_text_does_not_take_quadratic_time(text):
    """Redaction is linear in the text's length: about 1 MB of URLs, or of scheme characters before
    one, is done long before a deadline that a quadratic scan would pass (minutes)."""
    code = f"import json\nfrom slipstream.core.redact import redact\ntext = {_SLOW[text]}\nredact(text)\nprint('DONE', len(text))\n"
    try:
        out = run_python(code, timeout=30)  # a deadline for a hang, not a speed check
    except subprocess.TimeoutExpired:
        pytest.fail("redact() of about 1 MB of text ran past 30 s: it is not linear in the text's length")
    assert out.returncode == 0 and "DONE" in out.stdout, out.stderr[-2000:]


def test_a_url_with_a_port_and_an_at_sign_in_its_path_is_not_taken_for_credentials():
    """``http://host:9000/bucket/model@v2/train.arrow`` has no user information (the authority ends
    at the first '/', and ``9000`` is a port): its name is itself, and two datasets under it open
    together."""
    from slipstream.core.redact import redact_url
    from slipstream.remote.store import Store

    a = "http://127.0.0.1:9000/bucket/model@v2/train.arrow"
    b = "http://127.0.0.1:9000/other/model@v2/train.arrow"
    assert redact_url(a) == a
    store = Store()
    assert store.name(a) == a
    assert store.name(b) == b
