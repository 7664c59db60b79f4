"""``strata users``: SCRAM users, as ``kafka-configs.sh --entity-type users
--alter --add-config 'SCRAM-SHA-256=[iterations=8192,password=...]'`` does it.

``create NAME`` salts the password on this machine (librdkafka's
AlterUserScramCredentials: the broker receives the salt and the salted password, never
the password) for each ``--mechanism`` (default both SCRAM-SHA-256 and SCRAM-SHA-512,
so PLAIN and either SCRAM work); the password is read from ``--password-file`` or
standard input, or prompted for, never taken from the command line. ``list`` shows
users and their mechanisms and iterations; ``delete NAME`` removes them.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from service.cli.common import (
    CliError,
    admin_client,
    bootstrap_parent,
    guarded,
    needs_subcommand,
    wait_for,
)

__all__ = ["register"]

_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``users`` to the ``strata`` CLI."""
    common = bootstrap_parent()
    users = subparsers.add_parser("users", help="SCRAM users: create, list, delete (kafka-configs.sh)")
    cmds = users.add_subparsers(dest="users_command", metavar="COMMAND")
    users.set_defaults(func=needs_subcommand(users))

    p = cmds.add_parser("create", parents=[common], help="create a user or change its password")
    p.add_argument("name")
    p.add_argument("--mechanism", action="append", choices=_MECHANISMS, default=None,
                   help="SCRAM mechanism, repeatable (default: both)")
    p.add_argument("--iterations", type=int, default=4096, help="PBKDF2 iterations, 4096-16384 (default 4096)")
    p.add_argument("--password-file", default=None, metavar="FILE",
                   help="read the password from FILE ('-': standard input); default: prompt")
    p.set_defaults(func=guarded(_create))

    p = cmds.add_parser("list", parents=[common], help="users with their SCRAM mechanisms")
    p.set_defaults(func=guarded(_list))

    p = cmds.add_parser("delete", parents=[common], help="delete a user's credentials")
    p.add_argument("name")
    p.add_argument("--mechanism", action="append", choices=_MECHANISMS, default=None,
                   help="only this mechanism, repeatable (default: every one the user has)")
    p.set_defaults(func=guarded(_delete))


def _password(args: argparse.Namespace) -> bytes:
    if args.password_file == "-" or (args.password_file is None and not sys.stdin.isatty()):
        text = sys.stdin.readline().rstrip("\n")
    elif args.password_file is not None:
        try:
            with open(args.password_file, encoding="utf-8") as f:
                text = f.readline().rstrip("\n")
        except OSError as exc:
            raise CliError(f"--password-file: {exc}") from None
    else:
        text = getpass.getpass(f"password for {args.name}: ")
    if not text:
        raise CliError("the password is empty")
    return text.encode()


def _mechanism(name: str) -> Any:
    from confluent_kafka.admin import ScramMechanism  # type: ignore[attr-defined]

    return ScramMechanism[name.replace("-", "_")]


def _create(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import ScramCredentialInfo, UserScramCredentialUpsertion  # type: ignore[attr-defined]

    password = _password(args)
    changes = [UserScramCredentialUpsertion(args.name, ScramCredentialInfo(_mechanism(m), args.iterations), password)
               for m in (args.mechanism or _MECHANISMS)]
    client = admin_client(args)
    wait_for(client.alter_user_scram_credentials(changes), args)
    print(f"user {args.name}: {', '.join(args.mechanism or _MECHANISMS)} (iterations {args.iterations})")
    return 0


def _described(args: argparse.Namespace, names: list[str] | None) -> dict[str, Any]:
    client = admin_client(args)
    futures = client.describe_user_scram_credentials(names)
    if names is None:
        return dict(futures.result())
    return {name: future.result() for name, future in futures.items()}


def _list(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    try:
        users = _described(args, None)
    except KafkaException as exc:
        raise CliError(f"cannot list users: {exc.args[0].str()}") from None
    for name in sorted(users):
        infos = ", ".join(f"{i.mechanism.name.replace('_', '-')} (iterations {i.iterations})"
                          for i in users[name].scram_credential_infos)
        print(f"{name}\t{infos}")
    return 0


def _delete(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import UserScramCredentialDeletion  # type: ignore[attr-defined]

    mechanisms = args.mechanism
    if mechanisms is None:
        try:
            described = _described(args, [args.name])[args.name]
        except KafkaException as exc:
            raise CliError(f"user {args.name!r}: {exc.args[0].str()}") from None
        mechanisms = [i.mechanism.name.replace("_", "-") for i in described.scram_credential_infos]
    client = admin_client(args)
    wait_for(client.alter_user_scram_credentials(
        [UserScramCredentialDeletion(args.name, _mechanism(m)) for m in mechanisms]), args)
    print(f"deleted {', '.join(mechanisms)} of user {args.name}")
    return 0
