#!/usr/bin/python3
"""check_atspi.py - buzz-backfill-desktop read the way assistive technologies read it.

Run inside a private D-Bus session (dbus-run-session: the accessibility bus and the AT-SPI
registry are activated in it) as: check_atspi.py APP. Starts a private Xvfb and the
application against a server that does not exist, then reads its accessibility tree with
pyatspi (no test hook): the readiness, the list and the identity are unknown with a typed
reason (never READY, NOT READY, 0 backfills or offline), and the only action buttons are the
five supported controls. Exits 0 when all of that holds; prints the tree otherwise.
"""
import os
import subprocess
import sys
import tempfile
import time

import pyatspi

DEADLINE_S = 30
CONTROLS = ["Start", "Pause", "Resume", "Retry", "Validate"]


def start_xvfb():
    r, w = os.pipe()
    xvfb = subprocess.Popen(["Xvfb", "-displayfd", str(w), "-screen", "0", "1280x800x24",
                             "-nolisten", "tcp", "-noreset"], pass_fds=(w,),
                            stderr=subprocess.DEVNULL)
    os.close(w)
    num = b""
    deadline = time.time() + DEADLINE_S
    while not num.endswith(b"\n") and time.time() < deadline:
        chunk = os.read(r, 16)
        if not chunk:
            break
        num += chunk
    os.close(r)
    if not num.strip():
        sys.exit("check_atspi: Xvfb did not say its display")
    return xvfb, ":" + num.decode().strip()


def walk(acc, depth, out):
    try:
        out.append((acc.getRoleName(), acc.name or "", depth))
        for i in range(acc.childCount):
            walk(acc.getChildAtIndex(i), depth + 1, out)
    except Exception:  # an object that went away while being read
        pass
    return out


def tree_of(pid):
    desk = pyatspi.Registry.getDesktop(0)
    for i in range(desk.childCount):
        app = desk.getChildAtIndex(i)
        try:
            if app is not None and app.get_process_id() == pid:
                return walk(app, 0, [])
        except Exception:
            continue
    return []


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: check_atspi.py APP")
    xvfb, display = start_xvfb()
    work = tempfile.mkdtemp(prefix="buzz-atspi-")
    env = dict(os.environ, DISPLAY=display, GDK_BACKEND="x11", GSK_RENDERER="cairo",
               XDG_CONFIG_HOME=work, LANG="C.UTF-8")
    for k in ("BUZZ_BACKFILL_URL", "BUZZ_BACKFILL_TOKEN", "BUZZ_BACKFILL_TOKEN_FILE",
              "GTK_A11Y", "NO_AT_BRIDGE", "BUZZ_DESKTOP_TEST"):
        env.pop(k, None)
    app = subprocess.Popen([sys.argv[1], "--url", "ipc://%s/nothing.sock" % work,
                            "--interval", "500ms"], env=env)
    tree, ok = [], False
    try:
        deadline = time.time() + DEADLINE_S
        while time.time() < deadline and not ok:
            tree = tree_of(app.pid)
            labels = [n for r, n, d in tree if r == "label"]
            ok = (any(n.startswith("READINESS UNKNOWN (unavailable") for n in labels) and
                  any(n.startswith("backfills: unknown (unavailable") for n in labels) and
                  any(n.startswith("identity unknown (unavailable") for n in labels))
            if not ok:
                time.sleep(0.2)  # a bounded poll of what the tree shows
        problems = [] if ok else ["the unknown readiness, list and identity are not shown"]
        names = [n for r, n, d in tree]
        for bad in ("READY", "NOT READY", "0 backfills", "offline"):
            if any(n == bad or n.startswith(bad + ":") or n.startswith(bad + " (")
                   for n in names):
                problems.append("shows %r" % bad)
        # every button shown but the connection's own is an action: exactly the five
        buttons = [n for r, n, d in tree
                   if r == "push button" and n not in ("Connection settings", "Connect")]
        if sorted(buttons) != sorted(CONTROLS):
            problems.append("action buttons %r, want exactly %r" % (buttons, CONTROLS))
        if problems:
            for r, n, d in tree:
                print("  " * d + r, repr(n[:100]))
            sys.exit("check_atspi: " + "; ".join(problems))
        print("check_atspi: unknown shown as unknown, the five supported controls only")
    finally:
        # a process that does not end on SIGTERM in time is killed: a loaded machine once left
        # Xvfb running past 30 s and the test then waited out ctest's timeout
        for proc in (app, xvfb):
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        subprocess.run(["rm", "-rf", work], check=False)


if __name__ == "__main__":
    main()
