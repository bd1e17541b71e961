"""Shared fixtures: a seeded simulated fabric with a host and the NVMe-oF
target model. Every failure prints the seed and the replay command."""

import os

import pytest

import rctb.sim

NQN = "nqn.2024-01.io.rctb:pytest"
HOST_IP = "10.0.0.1"
TARGET_IP = "10.0.0.2"
SEED = int(os.environ.get("RCTB_SEED", "1"))


def build(seed=SEED, **target):
    fabric = rctb.sim.Fabric(seed)
    fabric.add_node("host", HOST_IP)
    model = fabric.add_nvme_target(TARGET_IP, NQN, **target)
    return fabric, model


@pytest.fixture
def sim():
    return build()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.when == "call":
        report.sections.append(
            ("replay", "seed %d: RCTB_SEED=%d pytest %s" % (SEED, SEED, item.nodeid))
        )
