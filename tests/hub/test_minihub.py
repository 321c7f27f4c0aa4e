"""tests/minihub.py, the project's local Hub server: the repo routes beyond push and pull."""

from __future__ import annotations

import pytest
from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError


@pytest.fixture(scope="module")
def repo():
    api = HfApi()
    repo_id = "testuser/minihub-routes"
    api.create_repo(repo_id, exist_ok=True)
    api.upload_file(path_or_fileobj=b"first", path_in_repo="a/one.txt", repo_id=repo_id)
    api.upload_file(path_or_fileobj=b"second", path_in_repo="two.txt", repo_id=repo_id)
    return repo_id


def test_branches_and_tags(repo):
    api = HfApi()
    api.create_branch(repo, branch="dev")
    api.create_tag(repo, tag="v1", revision="main")
    refs = api.list_repo_refs(repo)
    assert {b.name for b in refs.branches} == {"main", "dev"}
    assert [t.name for t in refs.tags] == ["v1"]
    with pytest.raises(HfHubHTTPError):
        api.create_branch(repo, branch="dev")  # already exists
    api.upload_file(path_or_fileobj=b"dev only", path_in_repo="dev.txt", repo_id=repo, revision="dev")
    assert "dev.txt" in api.list_repo_files(repo, revision="dev")
    assert "dev.txt" not in api.list_repo_files(repo, revision="v1")
    api.delete_tag(repo, tag="v1")
    api.delete_branch(repo, branch="dev")
    refs = api.list_repo_refs(repo)
    assert {b.name for b in refs.branches} == {"main"} and not refs.tags
    with pytest.raises(HfHubHTTPError):
        api.delete_branch(repo, branch="dev")  # gone


def test_tree_paths_info_commits_and_super_squash(repo):
    api = HfApi()
    top = {entry.path for entry in api.list_repo_tree(repo)}
    assert {"a", "two.txt"} <= top
    deep = {entry.path for entry in api.list_repo_tree(repo, recursive=True)}
    assert "a/one.txt" in deep
    info = {entry.path for entry in api.get_paths_info(repo, ["a/one.txt", "a", "missing"])}
    assert info == {"a/one.txt", "a"}
    assert len(api.list_repo_commits(repo)) >= 3  # creation + two uploads
    api.super_squash_history(repo)
    assert len(api.list_repo_commits(repo)) == 1
    assert set(api.list_repo_files(repo)) >= {"a/one.txt", "two.txt"}


def test_settings_and_auth_check(repo):
    api = HfApi()
    api.update_repo_settings(repo, private=True)
    assert api.model_info(repo).private
    api.update_repo_settings(repo, private=False)
    assert not api.model_info(repo).private
