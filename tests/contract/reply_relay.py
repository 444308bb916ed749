"""A TCP relay in front of PostgreSQL that loses one reply, for the in-doubt tests
(``test_pg_in_doubt.py``): the first commit a connection asks for after a statement
that finishes a job (``INSERT INTO finished_jobs``; or, given a marker, a statement
whose text holds it: a claim's) — a COMMIT, or the Sync that ends a pipeline's
implicit transaction — is carried out by the server, whose process is
then terminated (pg_terminate_backend) before the relay passes the answer on, and the
client's side of the connection is closed. The client knows
only that its connection dropped after it sent COMMIT: the commit is in doubt.

It reads the server's messages whole (a type byte, then a length) to tell COMMIT's
CommandComplete from the rest, so its clients must negotiate no SSL or GSS
encryption. Run as ``python -m tests.contract.reply_relay HOST PORT ADMIN_URL
LOST_FILE [MARKER TAG]``: with a marker, the commit lost is the first after the server
completed a statement of command tag ``TAG`` (``UPDATE``) following it: a client that
pipelines may send the marked statement before an earlier Sync's answer came back, and
that answer is not the marked statement's commit. It prints the port it listens on,
then relays until it is terminated;
``LOST_FILE`` appears once the reply was lost.
"""
from __future__ import annotations

import socket
import struct
import sys
import threading
from pathlib import Path

#: What a statement that finishes a job says (the settles done and dead).
MARKER = b"INSERT INTO finished_jobs"


class CommitReplyLost:
    def __init__(self, upstream: tuple[str, int], admin_url: str, lost: Path,
                 marker: bytes = MARKER, tag: bytes | None = None) -> None:
        self.marker = marker
        self.tag = tag
        self.upstream = upstream
        self.admin_url = admin_url
        self.lost = lost
        self.losing = threading.Lock()  # one reply lost, by one connection
        self.chosen = False
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]

    def serve(self) -> None:
        while True:
            client, _ = self.listener.accept()
            server = socket.create_connection(self.upstream)
            finishing = threading.Event()
            threading.Thread(target=self._requests, args=(client, server, finishing),
                             daemon=True).start()
            threading.Thread(target=self._replies, args=(server, client, finishing),
                             daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket,
                  finishing: threading.Event) -> None:
        tail = b""
        try:
            while data := client.recv(65536):
                if self.marker in tail + data:
                    finishing.set()  # before the server has it, hence before it answers
                tail = data[-len(self.marker):]
                server.sendall(data)
        except OSError:
            pass
        _hang_up(client, server)

    def _replies(self, server: socket.socket, client: socket.socket,
                 finishing: threading.Event) -> None:
        held = b""
        pid = None
        armed = self.tag is None  # else: once the marked statement completed
        try:
            while data := server.recv(65536):
                held += data
                while len(held) >= 5:
                    length = struct.unpack("!i", held[1:5])[0]
                    if len(held) < 1 + length:
                        break
                    message, held = held[:1 + length], held[1 + length:]
                    if message[:1] == b"K":  # BackendKeyData: the server process's pid
                        pid = struct.unpack("!i", message[5:9])[0]
                    # The commit's answer: COMMIT's, or the ReadyForQuery of a Sync
                    # that ended an implicit transaction (a pipeline in autocommit).
                    committed = (message[:1] == b"C" and message[5:-1] == b"COMMIT") or (
                        message[:1] == b"Z" and message[5:6] == b"I")
                    if (not armed and finishing.is_set() and message[:1] == b"C"
                            and message[5:].startswith(self.tag)):
                        armed = True
                    if committed and finishing.is_set() and armed and self._lose_one():
                        self._terminate(pid)
                        self.lost.write_text(f"{pid}\n")  # before the client can know
                        _hang_up(client, server)
                        return
                    client.sendall(message)
        except OSError:
            pass
        _hang_up(client, server)

    def _lose_one(self) -> bool:
        with self.losing:
            chosen, self.chosen = self.chosen, True
            return not chosen

    def _terminate(self, pid: int | None) -> None:
        import psycopg
        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]


def _hang_up(*sockets: socket.socket) -> None:
    for sock in sockets:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # closed already
        sock.close()


if __name__ == "__main__":
    host, port, admin_url, lost = sys.argv[1:5]
    marker, tag = (sys.argv[5].encode(), sys.argv[6].encode()) if len(sys.argv) > 6 else (MARKER, None)
    relay = CommitReplyLost((host, int(port)), admin_url, Path(lost), marker, tag)
    print(relay.port, flush=True)
    relay.serve()
