"""rctb.rocev2 on the simulator with the FPGA engine model: the three-step
bring-up, PRBS frames checked, channel filtering, RNR back-pressure with
frames held, and validation errors."""

import pytest

import rctb.sim
from rctb.rocev2 import (RoCEv2Engine, RoCEv2FpgaParams, RoCEv2HostParams, RoCEv2Mtu, RoCEv2RnrTimer, RoCEv2Server,
                         RoCEv2ServerCfg, RoCEv2TransportCfg)
from conftest import SEED

HOST, FPGA = "10.0.1.1", "10.0.1.2"


def bring_up(seed=SEED, depth=64, tc=None):
    fabric = rctb.sim.Fabric(seed)
    fabric.add_node("host", HOST)
    fabric.add_node("fpga", FPGA)
    server = RoCEv2Server(rocev2Cfg=RoCEv2ServerCfg(ip=FPGA, deviceName="host", rxQueueDepth=depth), backend=fabric)
    engine = RoCEv2Engine(backend=fabric, node="fpga", hostIp=HOST)
    tc = tc or RoCEv2TransportCfg()
    knobs = dict(pmtu=tc.pmtu, minRnrTimer=tc.minRnrTimer, rnrRetry=tc.rnrRetry, retryCount=tc.retryCount)
    host = server.getHostParams()
    assert isinstance(host, RoCEv2HostParams)
    fpga = engine.setupConnection(**host._asdict(), **knobs)
    assert isinstance(fpga, RoCEv2FpgaParams)
    server.completeConnection(fpga.fpgaQpn, fpgaLkey=fpga.fpgaLkey, **knobs)
    return fabric, server, engine, fpga


def drain(channel, limit):
    frames = []
    while len(frames) < limit:
        f = channel.get(timeout=0.5)
        if f is None:
            break
        frames.append(f)
    return frames


def test_prbs_frames_arrive_exactly(capsys):
    fabric, server, engine, fpga = bring_up()
    stream = server.stream
    assert fabric.stats()["delivered"] == 0
    engine.startStream([0, 1, 2], [64, 1000, 4096], 300, window=8)
    got = 0
    for i in range(300):
        f = stream.get(timeout=1.0)
        assert f is not None, "frame %d missing (seed %d)" % (i, SEED)
        with f:
            assert (f.ringPosition, f.channel, f.size) == (i, [0, 1, 2][i % 3], [64, 1000, 4096][i % 3])
            assert f.prbsMismatch() is None
            assert len(f.getData()) == f.size
            got += 1
    assert stream.get(timeout=0.1) is None
    assert got == 300
    assert server.RxFrameCount == 300 and server.RxByteCount == 100 * (64 + 1000 + 4096)
    assert server.FpgaQpn == fpga.fpgaQpn and server.FpgaLkey == fpga.fpgaLkey
    assert server.FpgaIp == FPGA and server.FpgaGid.endswith("ffff:0a00:0102")
    assert len(server.status()) == 15
    server.printConnInfo()
    out = capsys.readouterr().out
    assert "RxFrameCount : 300" in out and "FpgaQpn" in out
    assert engine.streamStats() == dict(posted=300, completed=300, bytes=100 * (64 + 1000 + 4096), errors=[])


def test_channel_views_filter():
    fabric, server, engine, _ = bring_up()
    ch1, ch3 = server.getChannel(1), server.getChannel(3)
    engine.startStream([1, 2, 3], [128], 30, window=4)
    ones = drain(ch1, 100)
    threes = drain(ch3, 100)
    assert [f.channel for f in ones] == [1] * 10 and [f.ringPosition for f in ones] == list(range(0, 30, 3))
    assert [f.channel for f in threes] == [3] * 10
    for f in ones + threes:
        assert f.prbsMismatch() is None
        f.release()
    assert server.counters()["filtered_out"] == 10  # channel 2 had no view
    assert server.heldFrames == 0


def test_held_frames_back_pressure_with_rnr():
    fabric, server, engine, _ = bring_up(depth=4, tc=RoCEv2TransportCfg(minRnrTimer=RoCEv2RnrTimer.MS_0_64))
    stream = server.stream
    engine.startStream([5], [256], 20, window=1)
    held = drain(stream, 4)
    assert len(held) == 4 and server.heldFrames == 4
    assert stream.get(timeout=0.05) is None, "a frame arrived with every slot held"
    stats = engine.streamStats()
    assert (stats["posted"], stats["completed"], stats["errors"]) == (5, 4, [])
    assert fabric.stats()["rnr_naks"] >= 50  # 50 ms of 0.64 ms RNR waits, every one NAKed
    for f in held:
        f.release()
    rest = []
    while (f := stream.get(timeout=0.5)) is not None:
        assert f.prbsMismatch() is None
        rest.append(f.ringPosition)
        f.release()
    assert [f.ringPosition for f in held] + rest == list(range(20))
    assert server.RxFrameCount == 20 and engine.streamStats()["completed"] == 20


def test_validation_errors():
    for bad in (dict(pmtu=0), dict(pmtu=6), dict(minRnrTimer=32), dict(minRnrTimer=-1), dict(rnrRetry=8), dict(retryCount=9)):
        with pytest.raises(ValueError, match=list(bad)[0]):
            RoCEv2TransportCfg(**bad)
    with pytest.raises(TypeError):
        RoCEv2TransportCfg(pmtu="5")
    assert [m.value for m in RoCEv2Mtu] == [1, 2, 3, 4, 5]
    assert len(RoCEv2RnrTimer) == 32 and RoCEv2RnrTimer.MS_655_36 == 0 and RoCEv2RnrTimer.MS_491_52 == 31
    fabric, server, engine, fpga = bring_up()
    for bad in (-1, 256, 1.0, True, "1"):
        with pytest.raises(ValueError, match="0..255"):
            server.getChannel(bad)
    with pytest.raises(RuntimeError, match="already"):
        server.completeConnection(fpga.fpgaQpn, pmtu=5, minRnrTimer=12, rnrRetry=7, retryCount=3)
    with pytest.raises(ValueError, match="minRnrTimer"):
        server.completeConnection(1, pmtu=5, minRnrTimer=40, rnrRetry=7, retryCount=3)
    f2 = rctb.sim.Fabric(1)
    f2.add_node("host", HOST)
    with pytest.raises(ValueError, match="deviceName"):
        RoCEv2Server(rocev2Cfg=RoCEv2ServerCfg(ip=FPGA, deviceName="nosuch"), backend=f2)
    with pytest.raises(ValueError):
        RoCEv2Server(rocev2Cfg=RoCEv2ServerCfg(ip=FPGA, deviceName="host", rxQueueDepth=0), backend=f2)
    with pytest.raises(ValueError, match="gidIndex"):
        RoCEv2Server(rocev2Cfg=RoCEv2ServerCfg(ip=FPGA, deviceName="host", gidIndex=-2), backend=f2)
    with pytest.raises(ValueError, match="not an IPv4"):
        RoCEv2Server(rocev2Cfg=RoCEv2ServerCfg(ip="fpga", deviceName="host"), backend=f2)
    e2 = RoCEv2Engine(backend=f2, node="host", hostIp=FPGA)
    with pytest.raises(ValueError, match="hostRqPsn"):
        e2.setupConnection(hostQpn=1, hostRqPsn=1 << 24, hostSqPsn=0, mrAddr=0, mrLen=4096)


def test_detect_gid_index_reads_sysfs(tmp_path):
    port = tmp_path / "class/infiniband/mlx5_0/ports/1"
    (port / "gid_attrs/types").mkdir(parents=True)
    (port / "gids").mkdir()
    for i, (kind, gid) in enumerate([("IB/RoCE v1", "0000:0000:0000:0000:0000:ffff:0a00:0101"),
                                     ("RoCE v2", "fe80:0000:0000:0000:0000:0000:0000:0001"),
                                     ("RoCE v2", "0000:0000:0000:0000:0000:ffff:0a00:0101")]):
        (port / "gid_attrs/types" / str(i)).write_text(kind + "\n")
        (port / "gids" / str(i)).write_text(gid + "\n")
    from rctb import _rctb
    assert _rctb.detect_gid_index("mlx5_0", "10.0.1.2", 1, str(tmp_path)) == 2
    assert _rctb.detect_gid_index("mlx5_0", "10.9.9.9", 1, str(tmp_path)) is None
    assert RoCEv2Server.detectGidIndex("nosuchdev0", "10.0.1.2") is None


def test_bring_up_replays_from_the_seed():
    def run():
        fabric, server, engine, fpga = bring_up(SEED)
        engine.startStream([7], [512], 50, window=4)
        frames = drain(server.stream, 100)
        for f in frames:
            f.release()
        return fpga, server.getHostParams(), fabric.now_ns, len(frames)
    assert run() == run()


def test_verbs_without_the_feature_is_a_clear_error():
    import rctb
    if rctb.HAS_VERBS:
        pytest.skip("this build has the verbs backend")
    with pytest.raises(RuntimeError, match="lacks the verbs backend"):
        RoCEv2Server(rocev2Cfg=RoCEv2ServerCfg(ip=FPGA, deviceName="rxe0"))
    with pytest.raises(NotImplementedError):
        RoCEv2Engine(backend="verbs", hostIp=HOST)
