"""The Dask cluster's credentials: who may talk to the scheduler and the workers.

A ``dask.distributed`` cluster runs what any client that reaches it submits, as the workers' user (root, for
the grader's sandbox), and the grader's tasks carry the hidden tests and send back results that its client
unpickles (in a sandbox of its own: :mod:`autograder.executors.bridge`). Over plain ``tcp://`` anyone who can reach a port, a student's account on the same machine
included, is such a client. So the grader talks to a cluster over TLS only, in which every end, the scheduler,
each worker and the grader, shows a certificate signed by a certificate authority of the instructor's own, and
refuses an end that does not (distributed's TLS: ``ssl.CERT_REQUIRED`` both ways).

``python -m autograder cluster-credentials --out DIR`` makes that authority and one certificate it signed
(:func:`make_credentials`), with ``openssl``:

- ``DIR/ca.pem``: the authority's certificate, which every end trusts;
- ``DIR/node.pem`` and ``DIR/node.key``: the certificate and key that every end shows;
- ``DIR/ca.key``: the authority's key, needed only to sign more certificates: keep it off the cluster.

``DIR`` must not exist: it is made by this command, readable by its owner only (0700, the keys 0600), and
:func:`cluster_security` refuses a folder or a file that another account owns or can write, or a key that
another account can read. Copy ``DIR`` (without ``ca.key``) to
each machine of the cluster with the same modes.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

CA, CA_KEY, CERTIFICATE, KEY = "ca.pem", "ca.key", "node.pem", "node.key"
DAYS = 365  # the certificates' validity: one course
OPENSSL_SECONDS = 60


def make_credentials(folder: Path) -> list[Path]:
    """Make a new certificate authority and one certificate it signed in ``folder`` (created, 0700); return the
    files written.

    Raises:
        ValueError: ``folder`` exists and is not empty, or ``openssl`` is not installed or failed.
    """
    folder = Path(folder)
    if folder.exists() or folder.is_symlink():  # one another account made could be swapped or read
        raise ValueError(f"--out must be a new folder (the credentials of one cluster), got {folder}, which exists")
    openssl = shutil.which("openssl")
    if openssl is None:
        raise ValueError("openssl is not installed (Debian: apt-get install openssl); it makes the credentials")
    folder.parent.mkdir(parents=True, exist_ok=True)
    os.mkdir(folder, 0o700)  # made here, by this account, readable by it alone: never an existing folder
    key_options = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    request = folder / "node.csr"
    steps = [
        [openssl, "req", "-x509", *key_options, "-keyout", CA_KEY, "-out", CA, "-days", str(DAYS),
         "-subj", "/CN=autograder cluster authority"],
        [openssl, "req", *key_options, "-keyout", KEY, "-out", request.name, "-subj", "/CN=autograder cluster node"],
        [openssl, "x509", "-req", "-in", request.name, "-CA", CA, "-CAkey", CA_KEY, "-CAcreateserial",
         "-out", CERTIFICATE, "-days", str(DAYS)],
    ]
    old_mask = os.umask(0o077)  # the keys are never readable by another account, not even for a moment
    try:
        for argv in steps:
            done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=OPENSSL_SECONDS,
                                  check=False)
            if done.returncode != 0:
                raise ValueError(f"openssl failed ({' '.join(argv[1:3])}): {done.stderr.strip()[-300:]}")
    finally:
        os.umask(old_mask)
    request.unlink()
    (folder / "ca.srl").unlink(missing_ok=True)
    return [folder / name for name in (CA, CERTIFICATE, KEY, CA_KEY)]


def _private(path: Path, what: str) -> None:
    info = path.lstat()
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO) or info.st_uid != os.getuid():
        raise ValueError(f"{what} {path} must be this account's and readable by it alone (chmod 600), "
                         f"got mode {stat.filemode(info.st_mode)} owned by uid {info.st_uid}")


def cluster_security(folder: Path):
    """``distributed.Security`` with the credentials in ``folder``, encryption required (checked as
    :func:`credential_files` checks them).

    Raises:
        ValueError: a file is missing, the key is readable by another account, or the folder is writable by one.
    """
    from distributed import Security

    folder = Path(folder)
    _check(folder)
    return Security(tls_ca_file=str(folder / CA), tls_client_cert=str(folder / CERTIFICATE),
                    tls_client_key=str(folder / KEY), require_encryption=True)


def credential_files(folder: Path) -> dict[str, bytes]:
    """The bytes of the authority's certificate, the certificate and the key in ``folder``, by file name, once
    checked: the grader reads them and hands them to its sandboxed bridge (:mod:`autograder.executors.bridge`),
    whose user could not read the key.

    Raises:
        ValueError: a file is missing, the key is readable by another account, or the folder is writable by one.
    """
    folder = Path(folder)
    _check(folder)
    return {name: (folder / name).read_bytes() for name in (CA, CERTIFICATE, KEY)}


def _check(folder: Path) -> None:
    for name in (CA, CERTIFICATE, KEY):
        if not (folder / name).is_file():
            raise ValueError(f"--cluster-credentials {folder} holds no {name} "
                             "(python -m autograder cluster-credentials --out DIR makes them)")
    for path in (folder, folder / CA, folder / CERTIFICATE):
        info = path.lstat()
        if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or stat.S_ISLNK(info.st_mode):
            raise ValueError(f"--cluster-credentials: {path} must be this account's, not a link, and not writable by "
                             f"other accounts, got mode {stat.filemode(info.st_mode)} owned by uid {info.st_uid}")
    _private(folder / KEY, "the key")
