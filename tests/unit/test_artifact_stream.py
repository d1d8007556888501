"""Artifacts come back as streamed files (GetArtifacts), checked on the controller.

Happy path against a real agent: several files in nested dirs arrive byte-exact and
`artifacts download` puts them in place. Against a hostile runner (tests/hostile_runner.py:
real asyncssh, the real protocol encoder, crafted streams): nothing is written outside the
store, each refusal is one stored line, a cut stream resumes from the bytes already there,
and `status` neither cuts a slow pull short nor calls its runner OFFLINE.
The in-process part (unit); the rest: tests/integration/test_artifact_stream.py."""

import pytest


@pytest.mark.parametrize(("offset", "ok"), [(0, True), (90, True), (100, True), (101, False)])
def test_the_agent_serves_only_offsets_inside_a_listed_file(offset, ok):
    from types import SimpleNamespace

    from lanpool.agent.errors import JobError
    from lanpool.agent.ssh.session import ChannelSession
    from lanpool.protocol import ArtifactRange, GetArtifacts

    job = SimpleNamespace(record=SimpleNamespace(terminal=True, artifact_files=[{"path": "m.bin", "size": 100}]))
    msg = GetArtifacts("j", [ArtifactRange("m.bin", offset)])
    if ok:
        assert ChannelSession._artifact_ranges(job, msg) == [("m.bin", offset, 100)]
    else:
        with pytest.raises(JobError, match="outside artifact"):
            ChannelSession._artifact_ranges(job, msg)
