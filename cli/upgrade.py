"""``asynqpy upgrade``: migrate the store to the wire protocol this release speaks (docs/releases.md,
"Upgrading"), in place, idempotent and resumable; ``--dry-run`` says what it would do."""

from __future__ import annotations

import click

from asynqpy.core.spine.migrations import DEFAULT_BATCH, StepReport, UpgradeReport
from asynqpy.core.spine.protocol import LIBRARY_VERSION

from .common import echo, emit_json, json_option, redis_url_option, user_errors


def _lines(report: UpgradeReport) -> list[str]:
    """What a run did (or, dry, would do), in words."""
    key = "" if report.stamped else " (no protocol key yet: protocol 1)"
    lines = [f"store: protocol {report.found}{key}; asynqpy {LIBRARY_VERSION} speaks protocol {report.target}"]
    if not report.steps:
        lines.append("nothing to migrate" + ("" if report.stamped or report.dry_run else "; stamped the protocol key"))
    for s in report.steps:
        resumed = f", resumed at {s.resumed_from!r}" if s.resumed_from else ""
        verb = "would change" if report.dry_run else "changed"
        lines.append(f"{s.name} ({s.from_version} -> {s.to_version}): {s.summary}: {s.seen} seen, {s.changed} "
                     f"{verb} in {s.batches} batch(es){resumed}" + ("" if report.dry_run else ", done"))
    for server in report.old_servers:
        lines.append(f"{'would refuse: ' if report.dry_run else 'forced past: '}live server {server}")
    if report.stale_cursor:
        lines.append(f"removed the cursor of a finished step ({report.stale_cursor}) a stopped run left")
    if not report.dry_run and report.steps:
        lines.append(f"store: protocol {report.now}")
    return lines


@click.command()
@redis_url_option
@click.option("--dry-run", is_flag=True, help="Write nothing: say what would be migrated (it reads every item a "
                                               "step would change).")
@click.option("--batch", "count", type=click.IntRange(1, 100_000), default=DEFAULT_BATCH, show_default=True,
              help="Items a batch reads; the cursor is stored in Redis after each batch.")
@click.option("--force", is_flag=True, help="Migrate even while live servers speak an older protocol (they will "
                                            "not read what is migrated).")
@json_option
@user_errors
def upgrade(redis_url: str, dry_run: bool, count: int, force: bool, as_json: bool) -> None:
    """Migrate the stored data to the wire protocol this release speaks.

    In place, batch by batch, with its cursor in Redis: idempotent (a second run does nothing),
    resumable (a run killed at any point is resumed by the next), safe while workers of this
    release run. Replace every worker with this release first: a live server of an older protocol
    makes it refuse (exit 2) unless --force. A store newer than this release is refused (exit 2).
    """
    from asynqpy.redisio.upgrade import run_upgrade

    def progress(step: StepReport) -> None:
        if not as_json and step.batches % 20 == 0:
            echo(f"{step.name}: {step.seen} seen, {step.changed} changed", err=True)

    report = run_upgrade(redis_url, count=count, dry_run=dry_run, force=force, on_batch=progress)
    if as_json:
        emit_json(report)
        return
    for line in _lines(report):
        echo(line)
