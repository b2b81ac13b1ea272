"""Lab servers shared through a labgrid coordinator: places, reservations, locks, leases.

With KRIG_LAB_COORDINATOR=HOST:PORT set, every IPMI rig is a labgrid place of
the same name, and a run holds its server like this:

1. a reservation with the filter name=<place> and the run's priority
   (KRIG_LAB_PRIO), polled every POLL seconds while it waits (labgrid drops a
   reservation nobody polls for 60 s);
2. once it is allocated: the lease tags (krig_holder, krig_since, krig_lease =
   now + KRIG_LAB_LEASE), then AcquirePlace (labgrid's lock);
3. a refresher thread writes krig_lease again every lease/3 seconds;
4. on every exit path: ReleasePlace, the krig_ tags removed, the reservation
   cancelled.

labgrid keeps a lock until someone releases it, also when its holder died, so
the lease is what gives a dead controller's server back: a krig that waits
for a place whose lock carries an expired krig_lease releases that lock and
cancels its reservation (the coordinator then allocates the place by
priority). labgrid names a lock by its session's host/user; krig's sessions
add the process (host/user:krigPID), so a give-back, which releases only a
lock of the dead holder's name, can never release a lock taken since by
another krig of the same host and user. Two waiting controllers that look at
once may both give the same lock back; the second finds nothing of it left
to release, and each records that it gave it back. A lock without krig_lease
(a person's `labgrid-client lock`) is never broken. While a live krig lease
is on a place, no krig takes it, also when the coordinator was restarted and
forgot its locks.

The labgrid Python client (ClientSession) runs on an event loop in one thread
of its own; every operation opens a short session (connect, read the places,
call, close), so a coordinator that went away costs one failed operation,
never a stuck process. Nothing secret is sent: place names are rig names,
tags come from the rig file's [lab] table (rigs/ipmi/spec.py lab_tags).
"""
import asyncio
import logging
import math
import os
import socket
import sys
import threading
import time

import grpc
from labgrid.remote.client import ClientSession
from labgrid.remote.common import Reservation, ReservationState
from labgrid.remote.generated import labgrid_coordinator_pb2 as pb

from krig.errors import RigError, UsageError

ENV = "KRIG_LAB_COORDINATOR"
HOLDER, SINCE, LEASE = "krig_holder", "krig_since", "krig_lease"
LEASE_TAGS = (HOLDER, SINCE, LEASE)
RPC_TIMEOUT = 20.0
POLL = 2.0
POLL_FAILURES = 3          # polls in a row the coordinator may miss while a run waits
DEFAULT_LEASE = 120


def address() -> str | None:
    """The coordinator's HOST:PORT, or None (then servers are locked in KRIG_LOCK_DIR)."""
    a = os.environ.get(ENV, "").strip()
    if not a:
        return None
    host, sep, port = a.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise UsageError(f"{ENV}: {a!r} is not HOST:PORT (e.g. 127.0.0.1:20408)")
    return a


def _env_number(var: str, default: float, minimum: float) -> float:
    v = os.environ.get(var)
    if not v:
        return default
    try:
        n = float(v)
    except ValueError:
        raise UsageError(f"{var}: expected a number, got {v!r}") from None
    if not math.isfinite(n) or n < minimum:
        raise UsageError(f"{var}: must be a finite number of at least {minimum:g}, got {v!r}")
    return n


def lease_seconds() -> float:
    return _env_number("KRIG_LAB_LEASE", DEFAULT_LEASE, 6)


def priority() -> float:
    return _env_number("KRIG_LAB_PRIO", 0.0, -1e9)


def holder_id() -> str:
    """Who holds a place, as the krig_holder tag says it: host and process."""
    return f"{socket.gethostname()}_{os.getpid()}"


class _LastError(logging.Handler):
    """labgrid's client logs a lost coordinator on the root logger (Python would print it to
    stderr, next to krig's own line); keep its last message for krig's one line instead."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.message = ""

    def emit(self, record):
        self.message = record.getMessage().splitlines()[0][:300]


_LAST = _LastError()
logging.getLogger().addHandler(_LAST)


# -- the event loop thread -------------------------------------------------------

_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _loop() -> asyncio.AbstractEventLoop:
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            _LOOP = asyncio.new_event_loop()
            threading.Thread(target=_LOOP.run_forever, name="krig-lab-client", daemon=True).start()
        return _LOOP


class Coordinator:
    """One labgrid coordinator; each method is one short session."""

    def __init__(self, addr: str):
        self.addr = addr

    def _call(self, fn):
        """Runs `await fn(session)` in a fresh session; trouble is one RigError line."""
        async def body():
            session = _Session(self.addr, asyncio.get_running_loop())
            try:
                await session.start()
                return await fn(session)
            finally:
                try:
                    await session.stop()
                    await session.close()
                except Exception:       # the stream is already gone; nothing left to close
                    pass

        _LAST.message = ""
        fut = asyncio.run_coroutine_threadsafe(asyncio.wait_for(body(), RPC_TIMEOUT), _loop())
        try:
            return fut.result(RPC_TIMEOUT + 5)
        except BaseException as e:
            fut.cancel()
            if isinstance(e, (KeyboardInterrupt, RigError, UsageError)):
                raise
            if isinstance(e, grpc.aio.AioRpcError):
                detail = e.details()
            elif isinstance(e, (TimeoutError, asyncio.TimeoutError)):
                detail = f"no answer within {RPC_TIMEOUT:.0f}s"
            else:
                detail = str(e).removeprefix("Error: ") or type(e).__name__
            why = f" ({_LAST.message})" if _LAST.message else ""
            raise RigError(f"lab coordinator {self.addr}: {detail}{why}") from None

    # -- reading ------------------------------------------------------------
    def places(self) -> dict:
        """name -> {tags, acquired (host/user or None), reservation (token or None), changed}."""
        async def fn(s):
            return {n: {"tags": dict(p.tags), "acquired": p.acquired, "reservation": p.reservation,
                        "changed": p.changed} for n, p in s.places.items()}
        return self._call(fn)

    def reservations(self) -> list[dict]:
        async def fn(s):
            r = await s.stub.GetReservations(pb.GetReservationsRequest())
            return [_res_dict(Reservation.from_pb2(x)) for x in r.reservations]
        return self._call(fn)

    # -- places -------------------------------------------------------------
    def sync_place(self, name: str, tags: dict) -> str:
        """Create the place if missing and set its tags; 'created', 'updated' or 'unchanged'."""
        async def fn(s):
            how = "unchanged"
            if name not in s.places:
                await s.stub.AddPlace(pb.AddPlaceRequest(name=name))
                how = "created"
            old = s.places[name].tags if name in s.places else {}
            if any(old.get(k) != v for k, v in tags.items()):
                await s.stub.SetPlaceTags(pb.SetPlaceTagsRequest(placename=name, tags=tags))
                how = "updated" if how == "unchanged" else how
            return how
        return self._call(fn)

    # -- holding a server ---------------------------------------------------
    def hold(self, place: str, prio: float, wait: float, lease: float, log=say) -> "Hold":
        """Reserve `place`, wait (priority order, up to `wait` s), lock it; the Hold refreshes the lease.
        A wait is said once to `log` (stderr), naming the holder."""
        h = Hold(self, place, prio, lease)
        try:
            h.acquire(wait, log)
        except BaseException:
            h.release()
            raise
        return h


def _res_dict(r: Reservation) -> dict:
    return {"token": r.token, "owner": r.owner, "state": r.state.name, "prio": r.prio,
            "filters": {k: dict(v) for k, v in r.filters.items()},
            "allocations": {k: list(v) for k, v in r.allocations.items()}, "created": r.created,
            "timeout": r.timeout}


class _Session(ClientSession):
    """A labgrid client session named host/user:krigPID (see the module's docstring)."""

    def getuser(self):
        return f"{super().getuser()}:krig{os.getpid()}"


def _lease_expired(tags: dict, now: float) -> bool:
    try:
        return float(tags[LEASE]) < now
    except (KeyError, ValueError):
        return False


async def _kick_stale(s, name: str, facts: dict) -> None:
    """A lock whose krig lease ran out: its holder is gone; give the place back."""
    p = s.places.get(name)
    if p is None or not p.acquired or not _lease_expired(p.tags, time.time()):
        return
    # a copy: the session's place objects change under us as the coordinator's updates arrive
    acquired, token, tags = p.acquired, p.reservation, dict(p.tags)
    await _give_back(s, name, token, acquired, tags.get(HOLDER))
    facts.setdefault("stale_released", []).append(
        {"holder": tags.get(HOLDER, "?"), "lease_ended": float(tags[LEASE]), "released": time.time()})


async def _give_back_token(s, token: str) -> None:
    try:
        await s.stub.CancelReservation(pb.CancelReservationRequest(token=token))
    except grpc.aio.AioRpcError:
        pass                # expired, or the coordinator was restarted


async def _give_back(s, name: str, token: str | None, acquired: str | None, holder: str | None) -> None:
    """Cancel the reservation, remove `holder`'s lease tags, then unlock the lock named `acquired`.
    In this order because the coordinator frees a place for the next reservation only on a
    scheduling pass after both are gone: unlocking last makes that pass happen now, not at its
    next 15 s tick. The tags go only while they still name `holder`, and ReleasePlace with
    fromuser leaves a lock of any other name alone: a late give-back touches no new holder."""
    if token:
        await _give_back_token(s, token)
    p = s.places.get(name)
    if p is not None and p.tags.get(HOLDER) == holder:
        await s.stub.SetPlaceTags(pb.SetPlaceTagsRequest(placename=name, tags={k: "" for k in LEASE_TAGS}))
    if acquired:
        await s.stub.ReleasePlace(pb.ReleasePlaceRequest(placename=name, fromuser=acquired))


class Hold:
    """One server held through the coordinator: reservation + lock + lease."""

    def __init__(self, coord: Coordinator, place: str, prio: float, lease: float):
        self.coord, self.place, self.prio, self.lease = coord, place, prio, lease
        self.me = holder_id()
        self.token: str | None = None
        self.locked = False
        self.facts: dict = {"coordinator": coord.addr, "place": place, "prio": prio, "lease_s": lease,
                            "holder": self.me}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _create(self):
        async def fn(s):
            if self.place not in s.places:
                raise RigError(f"rig {self.place}: the lab coordinator {self.coord.addr} has no place "
                               f"{self.place}; run `krig lab sync`")
            f = {"main": pb.Reservation.Filter(filter={"name": self.place})}
            r = await s.stub.CreateReservation(pb.CreateReservationRequest(filters=f, prio=self.prio))
            return r.reservation.token
        self.token = self.coord._call(fn)

    def _poll(self) -> tuple[str, str]:
        """(reservation state, who holds the place); releases a stale krig lock on the way."""
        async def fn(s):
            await _kick_stale(s, self.place, self.facts)
            try:
                r = await s.stub.PollReservation(pb.PollReservationRequest(token=self.token))
                state = ReservationState(r.reservation.state).name
            except grpc.aio.AioRpcError:
                state = "gone"          # expired and removed, or a restarted coordinator
            p = s.places.get(self.place)
            tags = dict(p.tags) if p else {}
            other = tags.get(HOLDER) if tags.get(HOLDER) not in (None, self.me) and \
                not _lease_expired(tags, time.time()) else None
            who = (p.acquired if p and p.acquired else None) or (f"krig {other}" if other else "a reservation")
            return ("held_by_other" if state == "allocated" and other else state), who
        return self.coord._call(fn)

    def acquire(self, wait: float, log=None):
        try:
            self._reserve_and_lock(wait, log)
        except RigError as e:       # name the rig in the one line
            raise RigError(str(e) if str(e).startswith("rig ") else f"rig {self.place}: {e}") from None

    def _reserve_and_lock(self, wait: float, log=None):
        t0 = time.monotonic()
        self._create()
        self.facts["reserved_at"] = time.time()
        said, failures = False, 0
        for _ in range(int(wait / POLL) + 2):
            try:
                state, who = self._poll()
                failures = 0
            except RigError:
                failures += 1       # a coordinator restarting: a few polls' grace, then one line
                if failures >= POLL_FAILURES:
                    raise
                state, who = "unreachable", "an unreachable coordinator"
            if state == "allocated":
                break
            if state in ("gone", "expired", "invalid"):
                self._create()
            elif not said and log:
                log(f"krig: rig {self.place}: waiting for the lab server (held by {who}; priority {self.prio:g})")
                said = True
            if time.monotonic() - t0 >= wait:
                raise RigError(f"rig {self.place}: the lab server is still held by {who} after waiting "
                               f"{wait:.0f}s (KRIG_LOCK_WAIT)")
            time.sleep(POLL)
        else:
            raise RigError(f"rig {self.place}: the lab server was not granted within {wait:.0f}s (KRIG_LOCK_WAIT)")

        async def lock(s):
            now = time.time()
            await s.stub.SetPlaceTags(pb.SetPlaceTagsRequest(placename=self.place, tags={
                HOLDER: self.me, SINCE: str(int(now)), LEASE: str(int(now + self.lease))}))
            await s.stub.AcquirePlace(pb.AcquirePlaceRequest(placename=self.place))
        self.coord._call(lock)
        self.locked = True
        self.facts.update(acquired_at=time.time(), waited_s=round(time.monotonic() - t0, 1),
                          token=self.token)
        self._thread = threading.Thread(target=self._refresh_loop, name=f"krig-lab-lease-{self.place}",
                                        daemon=True)
        self._thread.start()

    def _refresh_loop(self):
        while not self._stop.wait(self.lease / 3):
            try:
                self._refresh()
                self.facts.pop("coordinator_unreachable_since", None)
            except RigError as e:
                self.facts.setdefault("coordinator_unreachable_since", time.time())
                self.facts["refresh_error"] = str(e)

    def _refresh(self):
        async def fn(s):
            p = s.places.get(self.place)
            if p is None or p.tags.get(HOLDER) not in (None, self.me):
                self.facts.setdefault("lock_lost", f"place {self.place} was taken over: "
                                      f"{p.tags.get(HOLDER) if p else 'the place was deleted'}")
                return
            if not p.acquired:
                self.facts.setdefault("lock_lost", "the coordinator no longer shows the lock (restarted?); "
                                      "the lease still keeps other krig controllers off")
            await s.stub.SetPlaceTags(pb.SetPlaceTagsRequest(placename=self.place, tags={
                HOLDER: self.me, LEASE: str(int(time.time() + self.lease))}))
            try:
                await s.stub.PollReservation(pb.PollReservationRequest(token=self.token))
            except grpc.aio.AioRpcError:
                pass
        self.coord._call(fn)
        self.facts["refreshed_at"] = time.time()

    def release(self):
        """Unlock, remove the lease, cancel the reservation; never raises (a gone coordinator holds nothing)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(RPC_TIMEOUT + 10)
            self._thread = None
        if self.token is None:
            return

        async def fn(s):
            p = s.places.get(self.place)
            if p is not None and p.tags.get(HOLDER) == self.me:
                await _give_back(s, self.place, self.token, p.acquired if self.locked else None, self.me)
            else:           # never ours, or taken over: only our reservation goes
                await _give_back_token(s, self.token)
        try:
            self.coord._call(fn)
            self.facts["released_at"] = time.time()
        except RigError as e:
            self.facts["release_error"] = str(e)
            self.facts["released_at"] = time.time()     # this process stopped using the server
        except KeyboardInterrupt:
            self.facts["release_error"] = "interrupted while releasing"
            raise
        finally:
            self.token = None
            self.locked = False
