"""agent/shell/ports.py's two sides of a forwarded connection, in-process with transports that
record what they are asked: a job's server that answers and closes before the controller's
channel is open. With real agents and sockets: tests/integration/test_port_forward.py."""

from lanpool.agent.shell.ports import _ChannelSide, _JobSide


class _Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.eof = False
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def write_eof(self) -> None:
        self.eof = True

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name, default=None):
        return default


def _sides() -> tuple[_JobSide, _Transport, _ChannelSide, _Transport]:
    job, job_transport = _JobSide(), _Transport()
    job.connection_made(job_transport)
    channel, channel_transport = _ChannelSide(job), _Transport()
    channel.connection_made(channel_transport)
    return job, job_transport, channel, channel_transport


def test_a_server_that_answered_and_closed_before_the_channel_opened_still_ends_the_channel():
    # The request came through ahead of session_started; the answer and the server's EOF wait.
    job, job_transport, channel, channel_transport = _sides()
    job.data_received(b"HTTP/1.0 200 OK\r\n\r\nhello")
    assert job.eof_received() is True  # held: the transport stays open until the channel is there
    assert channel_transport.written == [] and not channel_transport.eof
    channel.session_started()
    assert channel_transport.written == [b"HTTP/1.0 200 OK\r\n\r\nhello"] and channel_transport.eof
    # The controller is done too: both EOFs known, so asyncssh closes the channel (False), and
    # with it the session it counts for the job (before the fix: True, open for good).
    assert channel.eof_received() is False
    channel.connection_lost(None)
    assert job_transport.closed and channel_transport.closed


def test_a_server_still_open_keeps_the_channel_half_open_for_its_answer():
    job, job_transport, channel, channel_transport = _sides()
    channel.session_started()
    assert channel.eof_received() is True  # the controller's EOF: the server may still answer
    assert job_transport.eof and not job_transport.closed
    job.data_received(b"late answer")
    assert channel_transport.written == [b"late answer"]
