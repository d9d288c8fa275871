"""The data-set registry (ssgp_ppl.data.registry): one record per named set with its reader,
split protocol and aliases; every name and alias loads its set, and each protocol refuses what
it does not allow before any file is read."""

import numpy as np
import pytest

from ssgp_ppl.data import registry
from ssgp_ppl.data.datasets import load
from ssgp_ppl.errors import SSGPError


def test_every_set_is_one_record_with_unique_names_and_aliases():
    names = [s.name for s in registry.SETS.values()]
    aliases = [a for s in registry.SETS.values() for a in s.aliases]
    assert registry.KNOWN == tuple(names) == tuple(registry.SETS)
    assert len(set(names + aliases)) == len(names) + len(aliases)
    assert registry.ALIASES == {a: s.name for s in registry.SETS.values() for a in s.aliases}
    assert {s.name for s in registry.SETS.values() if s.bundled} == {"pendulum", "autompg"}


def test_the_protocols_split_as_the_papers_do():
    """pendulum 315/315 and Auto-MPG 312/80 (fixed counts); the same rows whatever the alias."""
    for name, n_train, n_test in (("pendulum", 315, 315), ("autompg", 312, 80)):
        ds = load(name)
        assert (ds.n_train, ds.n_test) == (n_train, n_test)
        assert isinstance(registry.SETS[name].split, registry.Fixed)
    np.testing.assert_array_equal(load("auto-mpg").x_train, load("autompg").x_train)


@pytest.mark.parametrize("name", ["pendulum", "kin40k"])
def test_a_protocol_refuses_test_fraction_before_any_file_is_read(name, monkeypatch):
    def unread(root, name):
        raise AssertionError("read")

    s = registry.SETS[name]
    monkeypatch.setitem(registry.SETS, name, registry.NamedSet(s.name, unread, s.split, s.aliases,
                                                               s.bundled))
    with pytest.raises(SSGPError, match=f"test_fraction cannot be used with '{name}'"):
        load(name, test_fraction=0.2, data_dir=".")
