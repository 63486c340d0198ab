import pytest

from fisherhub.core.errors import InputError
from fisherhub.data.demo import DEMO_DOMAINS, demo_domain_path, load_demo_domain


@pytest.mark.parametrize("name", DEMO_DOMAINS)
def test_demo_domain_loads_with_enough_documents(name):
    ds = load_demo_domain(name)
    assert ds.column_names == ["text"]
    texts = [t for t in ds["text"] if t and t.strip()]
    assert len(texts) >= 90


def test_demo_files_are_small():
    total = sum(demo_domain_path(name).stat().st_size for name in DEMO_DOMAINS)
    assert total < 300_000


def test_unknown_domain_names_the_available_ones():
    with pytest.raises(InputError, match="unknown demo domain 'klingon'.*english_prose"):
        load_demo_domain("klingon")
