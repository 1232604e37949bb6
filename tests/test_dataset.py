"""The default dataset is the same bytes everywhere."""
import pytest

from workloads import dataset

pytestmark = pytest.mark.unit

# id of the dataset at scale 0.02, the same wherever it is generated; a change here means the generator no
# longer produces the same bytes (bump workloads/dataset.py GENERATOR_VERSION with it)
PINNED_ID_SCALE_002 = "2cf3ec73624b2a9f"


def test_generation_is_deterministic(tmp_path):
    a = dataset.generate(str(tmp_path / "a"), scale=0.02)
    b = dataset.generate(str(tmp_path / "b"), scale=0.02)
    assert a["id"] == b["id"] == PINNED_ID_SCALE_002
    assert dataset.tree_id(str(tmp_path / "a" / "tree")) == a["tree_id"]


def test_user_dataset_is_hashed(tmp_path):
    d = tmp_path / "mine"
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "f").write_bytes(b"x" * 10)
    root, m = dataset.from_user(str(d), str(tmp_path / "cache"))
    assert root == str(d)
    (d / "sub" / "f").write_bytes(b"y" * 10)
    assert dataset.from_user(str(d), str(tmp_path / "cache"))[1]["id"] != m["id"]
