"""Network profiles: how long a collective of S bytes takes on N devices. No torch.

A profile is a JSON file (`ddpbench comm` writes one) holding, for each collective and world size
that was measured, a fit t = alpha + beta * bytes of the median times, and a fabric model for
world sizes that were not measured:

    t(N, S) = latency(N) + bus_factor(N) * S / busbw(N)

(bus_factor as nccl-tests defines it: 2(N-1)/N for all_reduce, (N-1)/N for reduce_scatter and
all_gather, 1 for broadcast). A ring moves bus_factor * S bytes through every device's slowest
link, so busbw is that link's achieved bandwidth and does not grow or shrink with N. latency(N) is
the fabric's latency inside a node, plus, across nodes, a per-level latency times 2 log2(nodes)
(NCCL switches to trees for small messages at scale; a ring's 2(N-1) hops would overstate it).

Inside the measured range of sizes a prediction interpolates the measured medians (log-log):
on CPUs the curve bends where buffers leave the caches, which no straight line follows; outside
it the alpha-beta line is used. A bandwidth what-if (k times the bandwidth) divides the time
above the fitted latency by k. Every prediction comes with a band: for a fitted (collective, N), the
90th percentile of the fit's relative residuals over the measured sizes; for the fabric model, the profile's stated
`uncertainty` (presets: their link rates are datasheet figures times an assumed efficiency).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

import numpy as np

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")
DTYPES = ("float32", "float16", "bfloat16")
"""Element types `ddpbench comm` can measure: float32, and the halves DDP's compression hooks send."""
BUS_FACTORS = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
}
PROFILE_KIND = "ddpbench-network-profile"
RESULTS_KIND = "ddpbench-comm-results"
GB = 1e9  # bandwidths are shown in GB/s (10^9 bytes per second), as nccl-tests does

# Presets. Link rates are the vendors' nominal per-direction figures; achieved bus bandwidth is
# taken as 80 % of the slowest link (an assumption in line with what nccl-tests typically reaches
# on such systems, not a measurement: run `ddpbench comm --backend nccl` on yours and use that).
# Latencies are the order of magnitude of nccl-tests' small-message all_reduce times.
# Sources:
# - NVLink 4 (H100 SXM, H200 SXM): 900 GB/s total per GPU = 450 GB/s each way; NVIDIA H100 and
#   H200 Tensor Core GPU datasheets (nvidia.com/en-us/data-center/h100/, .../h200/).
# - DGX H100/H200: 8 GPUs on NVSwitch and 8 ConnectX-7 400 Gb/s NICs (one per GPU) for the
#   compute fabric; NVIDIA DGX H100 user guide, "Hardware overview".
# - PCIe 4.0 x16: 16 GT/s x 16 lanes, about 32 GB/s each way (PCI-SIG PCIe 4.0 specification).
# - InfiniBand EDR 100 Gb/s, HDR 200 Gb/s, NDR 400 Gb/s per port (InfiniBand Trade Association
#   roadmap); 100 Gb/s = 12.5 GB/s, 400 Gb/s = 50 GB/s.
# - Bus bandwidth and its factors: nccl-tests doc/PERFORMANCE.md (github.com/NVIDIA/nccl-tests).
ACHIEVED = 0.8
PRESETS = {
    "h100-nvswitch": {
        "devices_per_node": 8,
        "intra_busbw": 450 * GB * ACHIEVED,
        "intra_latency_s": 15e-6,
        "inter_busbw": 8 * 50 * GB * ACHIEVED,
        "inter_latency_s": 5e-6,
        "note": "8x H100 SXM per node on NVSwitch (NVLink 4); 8x 400 Gb/s InfiniBand NICs per node",
    },
    "h200-nvswitch": {
        "devices_per_node": 8,
        "intra_busbw": 450 * GB * ACHIEVED,
        "intra_latency_s": 15e-6,
        "inter_busbw": 8 * 50 * GB * ACHIEVED,
        "inter_latency_s": 5e-6,
        "note": "8x H200 SXM per node on NVSwitch (NVLink 4, as H100); 8x 400 Gb/s InfiniBand NICs",
    },
    "pcie4-8gpu": {
        "devices_per_node": 8,
        "intra_busbw": 32 * GB * ACHIEVED,
        "intra_latency_s": 25e-6,
        "inter_busbw": 12.5 * GB * ACHIEVED,
        "inter_latency_s": 8e-6,
        "note": "8 GPUs per node on PCIe 4.0 x16, no NVLink; one 100 Gb/s NIC per node",
    },
    "ib-100g": {
        "devices_per_node": 1,
        "intra_busbw": 12.5 * GB * ACHIEVED,
        "intra_latency_s": 0.0,
        "inter_busbw": 12.5 * GB * ACHIEVED,
        "inter_latency_s": 8e-6,
        "note": "one device per node, one 100 Gb/s (EDR) InfiniBand NIC each",
    },
    "ib-400g": {
        "devices_per_node": 1,
        "intra_busbw": 50 * GB * ACHIEVED,
        "intra_latency_s": 0.0,
        "inter_busbw": 50 * GB * ACHIEVED,
        "inter_latency_s": 5e-6,
        "note": "one device per node, one 400 Gb/s (NDR) InfiniBand NIC each",
    },
}
PRESET_UNCERTAINTY = 0.3


class ProfileError(ValueError):
    """A file that is not a network profile, or a question it cannot answer; names what is wrong."""


def percentile(values, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


@dataclass(frozen=True)
class Fit:
    """t = alpha_s + beta_s_per_byte * bytes for one collective, element type and world size."""

    collective: str
    world_size: int
    alpha_s: float
    beta_s_per_byte: float
    band: float
    """90th percentile of |measured / fitted - 1| over the measured sizes."""
    points: int
    min_bytes: int
    max_bytes: int
    dtype: str = "float32"

    def seconds(self, size_bytes: float) -> float:
        return self.alpha_s + self.beta_s_per_byte * size_bytes


def fit_alpha_beta(collective: str, world_size: int, sizes_bytes, times_s, dtype: str = "float32") -> Fit:
    """Least squares on relative error (each row divided by its time), so 8 B and 256 MiB count
    alike; a plain fit would ignore every size but the largest few. Both terms kept >= 0."""
    sizes, times = np.asarray(sizes_bytes, dtype=float), np.asarray(times_s, dtype=float)
    if len(sizes) < 2:
        raise ProfileError(
            f"{collective} ({dtype}) at world size {world_size}: need at least 2 sizes to fit, " f"got {len(sizes)}"
        )
    design = np.column_stack([1.0 / times, sizes / times])
    (alpha, beta), *_ = np.linalg.lstsq(design, np.ones_like(times), rcond=None)
    if alpha < 0 or beta < 0:  # refit the other term alone (a negative latency or bandwidth means nothing)
        alpha, beta = (
            (0.0, float(np.sum(sizes / times) / np.sum((sizes / times) ** 2)))
            if alpha < 0
            else (float(np.sum(1 / times) / np.sum((1 / times) ** 2)), 0.0)
        )
    relative = (alpha + beta * sizes) / times - 1.0
    return Fit(
        collective,
        int(world_size),
        float(alpha),
        float(beta),
        percentile(np.abs(relative), 90),
        len(sizes),
        int(sizes.min()),
        int(sizes.max()),
        dtype,
    )


def profile_from_results(results: dict, name: str) -> dict:
    """A profile from `ddpbench comm` results: one fit per collective and element type (this run's
    world size), and the fabric model from the float32 all_reduce fit (latency = alpha, busbw = bus
    factor / beta)."""
    world = int(results["world_size"])
    fits = []
    for collective in COLLECTIVES:
        for dtype in DTYPES:
            rows = [
                r for r in results["results"] if r["collective"] == collective and r.get("dtype", "float32") == dtype
            ]
            if len(rows) >= 2:
                fit = fit_alpha_beta(collective, world, [r["bytes"] for r in rows], [r["p50_s"] for r in rows], dtype)
                # The measured medians too: inside the measured range a prediction interpolates them,
                # since caches make real curves bend where a straight alpha-beta line cannot.
                fits.append({**fit.__dict__, "measured": [[r["bytes"], r["p50_s"]] for r in rows]})
    reduce_fit = next((f for f in fits if f["collective"] == "all_reduce" and f["dtype"] == "float32"), None)
    fabric = None
    if reduce_fit and reduce_fit["beta_s_per_byte"] > 0 and world > 1:
        busbw = BUS_FACTORS["all_reduce"](world) / reduce_fit["beta_s_per_byte"]
        fabric = {
            "devices_per_node": world,
            "intra_busbw": busbw,
            "intra_latency_s": reduce_fit["alpha_s"],
            "inter_busbw": busbw,
            "inter_latency_s": 0.0,
            "note": f"extrapolated from the all_reduce fit at world size {world}: same bus bandwidth "
            "and latency at any size (a measured profile knows nothing about other fabrics)",
        }
    return {
        "kind": PROFILE_KIND,
        "version": 1,
        "name": name,
        "backend": results["backend"],
        "device": results.get("device"),
        "source": "measured by ddpbench comm",
        "hostname": (results.get("env") or {}).get("hostname"),
        "world_sizes": [world],
        "fits": fits,
        "fabric": fabric,
        "uncertainty": PRESET_UNCERTAINTY,
    }


def preset_profile(name: str) -> dict:
    fabric = dict(PRESETS[name])
    return {
        "kind": PROFILE_KIND,
        "version": 1,
        "name": name,
        "backend": "nccl",
        "device": "cuda",
        "source": f"preset: {fabric['note']} (datasheet link rates x {ACHIEVED:.0%}; not measured)",
        "world_sizes": [],
        "fits": [],
        "fabric": fabric,
        "uncertainty": PRESET_UNCERTAINTY,
    }


def merge_profiles(profiles: list[dict], name: str) -> dict:
    """Several `comm` runs (e.g. world sizes 2 and 4) as one profile; the largest world's fabric."""
    merged = dict(
        profiles[-1],
        name=name,
        fits=[f for p in profiles for f in p["fits"]],
        world_sizes=sorted({w for p in profiles for w in p["world_sizes"]}),
    )
    largest = max(profiles, key=lambda p: max(p["world_sizes"] or [0]))
    merged["fabric"] = largest["fabric"]
    return merged


def load_profile(spec: str) -> dict:
    """A preset name (`h100-nvswitch`, or `preset:h100-nvswitch`) or a profile JSON file."""
    name = spec.removeprefix("preset:")
    if name in PRESETS:
        return preset_profile(name)
    if not os.path.isfile(spec):
        raise ProfileError(f"profile {spec!r} is neither a file nor a preset; presets: {', '.join(PRESETS)}")
    try:
        with open(spec, encoding="utf-8") as handle:
            profile = json.load(handle)
    except (OSError, ValueError) as exc:
        raise ProfileError(f"profile {spec!r} is not readable JSON: {exc}") from None
    if not isinstance(profile, dict) or profile.get("kind") != PROFILE_KIND:
        raise ProfileError(
            f'{spec!r} is not a network profile (no "kind": "{PROFILE_KIND}"; '
            "make one with ddpbench comm, or use a preset)"
        )
    check_profile(profile, spec)
    return profile


FABRIC_FIELDS = {
    "intra_busbw": "bytes/s > 0",
    "inter_busbw": "bytes/s > 0",
    "intra_latency_s": "seconds >= 0",
    "inter_latency_s": "seconds >= 0",
}
FIT_FIELDS = {"alpha_s": "seconds >= 0", "beta_s_per_byte": "seconds per byte >= 0", "band": "a fraction >= 0"}


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value) -> bool:
    return _number(value) and float(value).is_integer() and value >= 1


def check_profile(profile: dict, spec: str) -> None:
    """Every field a prediction reads, checked once when the profile is loaded: a hand-edited or
    truncated profile fails here, naming the field and what it may hold, not deep in a replay."""
    fits, fabric = profile.get("fits") or [], profile.get("fabric")
    if not isinstance(fits, list):
        raise ProfileError(f'profile {spec!r}: "fits" must be a list of fits; got {type(fits).__name__}')
    for number, fit in enumerate(fits, start=1):
        where = f"profile {spec!r}: fit {number}"
        if not isinstance(fit, dict):
            raise ProfileError(f"{where} must be an object; got {type(fit).__name__}")
        if not isinstance(fit.get("collective"), str):
            raise ProfileError(f"{where} needs \"collective\", one of {', '.join(COLLECTIVES)}")
        where += f" ({fit['collective']})"
        if not _whole(fit.get("world_size")):
            raise ProfileError(f"{where}: world_size must be a whole number >= 1; got {fit.get('world_size')!r}")
        for name, allowed in FIT_FIELDS.items():
            if not (_number(fit.get(name)) and fit[name] >= 0):
                raise ProfileError(f"{where}: {name} must be {allowed}; got {fit.get(name)!r}")
        if not isinstance(fit.get("dtype", "float32"), str):
            raise ProfileError(f"{where}: dtype must be one of {', '.join(DTYPES)}; got {fit['dtype']!r}")
        measured = fit.get("measured") or []
        if not isinstance(measured, list) or not all(
            isinstance(point, list) and len(point) == 2 and all(_number(v) and v > 0 for v in point)
            for point in measured
        ):
            raise ProfileError(f"{where}: measured must be a list of [bytes, seconds] pairs, both > 0")
    if fabric is not None:
        if not isinstance(fabric, dict):
            raise ProfileError(f'profile {spec!r}: "fabric" must be an object or null; got {type(fabric).__name__}')
        for name, allowed in FABRIC_FIELDS.items():
            if name not in fabric:
                raise ProfileError(
                    f"profile {spec!r}: the fabric lacks {name}; a fabric needs "
                    + ", ".join(f"{n} ({a})" for n, a in FABRIC_FIELDS.items())
                )
            if not (_number(fabric[name]) and (fabric[name] > 0 if allowed.endswith("> 0") else fabric[name] >= 0)):
                raise ProfileError(f"profile {spec!r}: the fabric's {name} must be {allowed}; got {fabric[name]!r}")
        if fabric.get("devices_per_node") is not None and not _whole(fabric["devices_per_node"]):
            raise ProfileError(
                f"profile {spec!r}: the fabric's devices_per_node must be a whole number >= 1 or null; "
                f"got {fabric['devices_per_node']!r}"
            )
    if not fits and not fabric:
        raise ProfileError(f"{spec!r} holds neither fits nor a fabric model")
    uncertainty = profile.get("uncertainty", PRESET_UNCERTAINTY)
    if not (_number(uncertainty) and uncertainty >= 0):
        raise ProfileError(f"profile {spec!r}: uncertainty must be a fraction >= 0; got {uncertainty!r}")


@dataclass(frozen=True)
class Prediction:
    seconds: float
    low_s: float
    high_s: float
    basis: str
    """'measured' (interpolated between measured sizes), 'fit' (the alpha-beta line at this world
    size) or 'fabric' (the fabric model); with ', float32 rate' when the element type asked for
    was not measured and float32's time for the same bytes stands in."""


def _fit_for(profile: dict, collective: str, world_size: int, dtype: str) -> tuple[dict | None, bool]:
    """The fit of this collective and world size in `dtype`, else in float32 (and whether it is
    a stand-in). Older profiles have no dtype: their fits are float32."""
    fits = [f for f in profile.get("fits", []) if f["collective"] == collective and int(f["world_size"]) == world_size]
    exact = next((f for f in fits if f.get("dtype", "float32") == dtype), None)
    if exact is not None:
        return exact, False
    return next((f for f in fits if f.get("dtype", "float32") == "float32"), None), dtype != "float32"


def predict(
    profile: dict,
    collective: str,
    world_size: int,
    size_bytes: float,
    bandwidth_scale: float = 1.0,
    dtype: str = "float32",
) -> Prediction:
    """Time of one collective of `size_bytes` bytes of `dtype`. `bandwidth_scale` k divides the
    bandwidth term (k=2: twice the bandwidth)."""
    if world_size < 1:
        raise ProfileError(f"world size must be >= 1; got {world_size}")
    if world_size == 1:
        return Prediction(0.0, 0.0, 0.0, "single device")
    fit, stand_in = _fit_for(profile, collective, world_size, dtype)
    if fit is not None and stand_in:
        # float32's fit stands in: scale it by this type's ratio where one was measured elsewhere.
        base = predict(profile, collective, world_size, size_bytes, bandwidth_scale)
        ratio = _dtype_ratio(profile, collective, size_bytes, dtype)
        if not ratio:
            return Prediction(base.seconds, base.low_s, base.high_s, base.basis + ", float32 rate")
        band = (base.high_s - base.seconds) / base.seconds if base.seconds else 0.0
        seconds = base.seconds * ratio
        return Prediction(
            seconds, seconds * (1 - band), seconds * (1 + band), f"{base.basis}, {dtype}/float32 as measured"
        )
    if fit is not None:
        band = fit["band"]
        measured = sorted(fit.get("measured") or [])
        if len(measured) >= 2 and measured[0][0] <= size_bytes <= measured[-1][0]:
            seconds = float(
                np.exp(
                    np.interp(np.log(size_bytes), np.log([m[0] for m in measured]), np.log([m[1] for m in measured]))
                )
            )
            # k times the bandwidth divides what is above the fitted latency.
            seconds = fit["alpha_s"] + max(0.0, seconds - fit["alpha_s"]) / bandwidth_scale
            return Prediction(seconds, seconds * (1 - band), seconds * (1 + band), "measured")
        seconds = fit["alpha_s"] + fit["beta_s_per_byte"] * size_bytes / bandwidth_scale
        return Prediction(seconds, seconds * (1 - band), seconds * (1 + band), "fit")
    fabric = profile.get("fabric")
    if not fabric:
        measured = sorted({int(f["world_size"]) for f in profile.get("fits", []) if f["collective"] == collective})
        raise ProfileError(
            f"profile {profile.get('name')!r} has no {collective} at world size {world_size} "
            f"(measured: {measured}) and no fabric model to extrapolate with"
        )
    per_node = fabric.get("devices_per_node") or world_size
    nodes = math.ceil(world_size / per_node)
    busbw = fabric["intra_busbw"] if nodes == 1 else min(fabric["intra_busbw"], fabric["inter_busbw"])
    latency = fabric["intra_latency_s"] + (2 * math.log2(nodes) * fabric["inter_latency_s"] if nodes > 1 else 0.0)
    seconds = latency + BUS_FACTORS[collective](world_size) * size_bytes / (busbw * bandwidth_scale)
    band = profile.get("uncertainty", PRESET_UNCERTAINTY)
    basis = "fabric"
    if dtype != "float32":
        # The fabric model is float32's. Where the profile measured this element type beside
        # float32 at some world size, their ratio for these bytes is carried over (an assumption:
        # the ratio was measured at that world size only); else float32's time stands in.
        ratio = _dtype_ratio(profile, collective, size_bytes, dtype)
        seconds, basis = (
            (seconds * ratio, f"fabric, {dtype}/float32 as measured") if ratio else (seconds, "fabric, float32 rate")
        )
    return Prediction(seconds, seconds * (1 - band), seconds * (1 + band), basis)


def _dtype_ratio(profile: dict, collective: str, size_bytes: float, dtype: str) -> float | None:
    """Time in `dtype` over time in float32 for the same bytes, at a world size both were measured."""
    for fit in profile.get("fits", []):
        if fit["collective"] == collective and fit.get("dtype", "float32") == dtype:
            world = int(fit["world_size"])
            base, stand_in = _fit_for(profile, collective, world, "float32")
            if base is not None and not stand_in:
                half = predict(profile, collective, world, size_bytes, dtype=dtype).seconds
                full = predict(profile, collective, world, size_bytes).seconds
                return half / full if full > 0 else None
    return None


def format_results_table(results: dict, profile: dict | None = None) -> str:
    """nccl-tests-like table: size, count, type, time p50/p90, algbw, busbw, and the fit's prediction."""
    lines = [
        f"# {results['backend']} on {results['world_size']} x {results['device']}"
        f"  (time = slowest rank, one call after a barrier; GB/s = 1e9 B/s)",
        f"{'collective':>14} {'size (B)':>12} {'count':>10} {'type':>8} {'iters':>6} {'p50 (us)':>11} "
        f"{'p90 (us)':>11} {'algbw GB/s':>11} {'busbw GB/s':>11} {'fit (us)':>10}",
    ]
    for row in results["results"]:
        fitted = ""
        dtype = row.get("dtype", "float32")
        if profile is not None:
            fit = next(
                (
                    f
                    for f in profile["fits"]
                    if f["collective"] == row["collective"] and f.get("dtype", "float32") == dtype
                ),
                None,
            )
            if fit:
                fitted = f"{(fit['alpha_s'] + fit['beta_s_per_byte'] * row['bytes']) * 1e6:10.1f}"
        lines.append(
            f"{row['collective']:>14} {row['bytes']:>12} {row['elements']:>10} {dtype:>8} {row['iterations']:>6} "
            f"{row['p50_s'] * 1e6:11.1f} {row['p90_s'] * 1e6:11.1f} "
            f"{row['algbw_bytes_per_s'] / GB:11.3f} {row['busbw_bytes_per_s'] / GB:11.3f} {fitted:>10}"
        )
    if profile is not None:
        for fit in profile["fits"]:
            busbw = (
                BUS_FACTORS[fit["collective"]](fit["world_size"]) / fit["beta_s_per_byte"]
                if fit["beta_s_per_byte"]
                else float("inf")
            )
            lines.append(
                f"fit {fit['collective']:>14} {fit.get('dtype', 'float32'):>8} N={fit['world_size']}: "
                f"alpha {fit['alpha_s'] * 1e6:.1f} us, "
                f"beta {fit['beta_s_per_byte'] * 1e9:.4f} ns/B (busbw {busbw / GB:.3f} GB/s), "
                f"90 % of sizes within {fit['band']:.1%}"
            )
    return "\n".join(lines)
