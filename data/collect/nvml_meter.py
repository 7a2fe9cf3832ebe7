"""`NvmlMeter`: the `Meter` of a real NVIDIA GPU. The only module that imports pynvml (nvidia-ml-py).

Units are converted once, here: NVML reports energy in mJ, power in mW, clocks in MHz.
"""

from __future__ import annotations

import hashlib
import time

from joulecast.data.errors import JoulecastError

# nvmlClocksThrottleReason bit -> name (nvml.h)
_THROTTLE_BITS = {0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                  0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake", 0x100: "display_clocks"}


class MeterUnavailable(JoulecastError):
    """No NVML or no GPU: measuring needs a real NVIDIA GPU."""


class NvmlMeter:
    """Reads one GPU through NVML; never changes its settings."""

    def __init__(self, index: int = 0):
        try:
            import pynvml
        except ImportError:
            raise MeterUnavailable("measuring needs NVML: pip install 'joulecast[collect]' on a machine with an NVIDIA GPU") from None
        self._nvml = pynvml
        self._has_counter: bool | None = None
        try:
            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except pynvml.NVMLError as exc:
            raise MeterUnavailable(f"no NVIDIA GPU reachable through NVML ({exc}); estimates need none, measuring does") from None

    def _call(self, fn: str, *args: object) -> object:
        try:
            return getattr(self._nvml, fn)(self._handle, *args)
        except self._nvml.NVMLError as exc:
            raise MeterUnavailable(f"NVML {fn} failed: {exc}") from None

    def time_s(self) -> float:
        return time.monotonic()

    def energy_j(self) -> float:
        """The total-energy counter (Volta and newer); NaN where the GPU has none, so power samples are integrated."""
        if self._has_counter is None:
            try:
                self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
                self._has_counter = True
            except self._nvml.NVMLError:
                self._has_counter = False
        if not self._has_counter:
            return float("nan")
        return float(self._call("nvmlDeviceGetTotalEnergyConsumption")) / 1e3

    def describe(self) -> dict[str, str]:
        """The GPU's identity for the dataset card; the UUID is hashed, never stored as is."""
        def text(value: object) -> str:
            return value.decode() if isinstance(value, bytes) else str(value)
        uuid = text(self._call("nvmlDeviceGetUUID"))
        return {"name": text(self._call("nvmlDeviceGetName")),
                "uuid_hash": hashlib.sha256(uuid.encode()).hexdigest()[:16],
                "driver": text(self._nvml.nvmlSystemGetDriverVersion()),
                "cuda_driver": str(self._nvml.nvmlSystemGetCudaDriverVersion_v2()),
                "power_limit_default_w": str(float(self._call("nvmlDeviceGetPowerManagementDefaultLimit")) / 1e3)}

    def power_w(self) -> float:
        return float(self._call("nvmlDeviceGetPowerUsage")) / 1e3

    def clocks_mhz(self) -> tuple[float, float]:
        return (float(self._call("nvmlDeviceGetClockInfo", self._nvml.NVML_CLOCK_SM)),
                float(self._call("nvmlDeviceGetClockInfo", self._nvml.NVML_CLOCK_MEM)))

    def temperature_c(self) -> float:
        return float(self._call("nvmlDeviceGetTemperature", self._nvml.NVML_TEMPERATURE_GPU))

    def power_limit_w(self) -> float:
        return float(self._call("nvmlDeviceGetEnforcedPowerLimit")) / 1e3

    def throttle_reasons(self) -> frozenset[str]:
        # Renamed "clocks event reasons" in newer bindings; the old name may go.
        name = next(n for n in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
                    if hasattr(self._nvml, n))
        bits = int(self._call(name))
        return frozenset(name for bit, name in _THROTTLE_BITS.items() if bits & bit)


def open_meter(index: int = 0) -> NvmlMeter:
    """The meter of GPU `index`; a one-line `MeterUnavailable` where there is no NVML or GPU."""
    return NvmlMeter(index)
