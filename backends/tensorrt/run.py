"""Run an engine where a CUDA GPU is: deserialize, one execution context, ``set_input_shape`` per call, device
buffers from torch (CUDA build) or cuda-python, ``execute_async_v3`` on a stream. Without a device the runner is
never made: ``load_engine`` raises ``HopSkipped``."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

from onnxbridge.errors import HopSkipped


class Runner:
    """``Runner(path)(feeds) -> [outputs]`` in the engine's output order."""

    def __init__(self, path: Path, flavour_name: str | None = None):
        from onnxbridge.backends.tensorrt import artifact, flavours

        data = artifact.read_engine(Path(path))
        side, _ = artifact.read_sidecar(Path(path), data)
        name = flavour_name or flavours.for_engine(data, side.get("flavour") if side else None)
        self.flavour, self._runtime, self.engine = artifact.load_engine(Path(path), data, name)
        self.memory = _device_memory()
        trt = self.flavour.trt
        self.context = self.engine.create_execution_context()
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.inputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.outputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
        self.what_ran = (f"{self.flavour.name} {self.flavour.version}: the engine file {Path(path).name} on "
                         f"{self.memory.device_name()}")

    def __call__(self, feeds: Mapping) -> list:
        import numpy as np

        trt = self.flavour.trt
        missing = [n for n in self.inputs if n not in feeds]
        if missing:
            raise ValueError(f"missing input(s) {', '.join(missing)}")
        keep = []
        for name in self.inputs:
            want = trt.nptype(self.engine.get_tensor_dtype(name))
            arr = np.ascontiguousarray(np.asarray(feeds[name]).astype(want, copy=False))
            if not self.context.set_input_shape(name, arr.shape):
                raise ValueError(f"input '{name}' shape {arr.shape} is outside the engine's optimization profile")
            buf = self.memory.upload(arr)
            keep.append(buf)
            self.context.set_tensor_address(name, self.memory.address(buf))
        results = []
        for name in self.outputs:
            shape = tuple(self.context.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise ValueError(f"output '{name}' has a data-dependent shape {shape}; not supported by this runner")
            buf = self.memory.empty(shape, trt.nptype(self.engine.get_tensor_dtype(name)))
            keep.append(buf)
            results.append(buf)
            self.context.set_tensor_address(name, self.memory.address(buf))
        stream = self.memory.stream()
        if not self.context.execute_async_v3(self.memory.stream_handle(stream)):
            raise RuntimeError("execute_async_v3 failed")
        self.memory.synchronize(stream)
        outputs = [self.memory.download(b) for b in results]
        for buf in keep[:len(self.inputs)]:
            self.memory.free(buf)
        return outputs


def _device_memory():
    """Device buffers from torch when it has CUDA, else cuda-python; HopSkipped when neither can reach a GPU."""
    try:
        import torch

        if torch.cuda.is_available():
            return _Torch(torch)
    except ImportError:
        pass
    try:
        try:
            from cuda.bindings import runtime as cudart
        except ImportError:
            from cuda import cudart
    except ImportError:
        raise HopSkipped("no CUDA allocator: install a CUDA build of torch or cuda-python to run engines") from None
    return _CudaPython(cudart)


class _Torch:
    def __init__(self, torch):
        self.torch = torch

    def device_name(self) -> str:
        return self.torch.cuda.get_device_name(0)

    def upload(self, arr):
        return self.torch.from_numpy(arr).cuda()

    def empty(self, shape, dtype):
        import numpy as np

        return self.torch.empty(shape, dtype=self.torch.from_numpy(np.empty(0, dtype)).dtype, device="cuda")

    def free(self, t) -> None:
        pass  # torch's caching allocator frees when the tensor is dropped

    def address(self, t) -> int:
        return t.data_ptr()

    def stream(self):
        return self.torch.cuda.Stream()

    def stream_handle(self, s) -> int:
        return s.cuda_stream

    def synchronize(self, s) -> None:
        s.synchronize()

    def download(self, t):
        return t.cpu().numpy()


class _CudaPython:
    """Raw cudaMalloc buffers; each is (pointer, shape, dtype), freed after download."""

    def __init__(self, cudart):
        self.rt = cudart

    def device_name(self) -> str:
        try:
            name = self._check(self.rt.cudaGetDeviceProperties(0)).name
            return (name.decode() if isinstance(name, bytes) else str(name)).strip("\x00") or "a CUDA device"
        except Exception:  # noqa: BLE001 - a name is a nicety
            return "a CUDA device"

    def _check(self, result):
        err, *rest = result if isinstance(result, tuple) else (result,)
        if int(err) != 0:
            raise RuntimeError(f"CUDA error {err}")
        return rest[0] if rest else None

    def upload(self, arr):
        ptr = self._check(self.rt.cudaMalloc(max(arr.nbytes, 1)))
        self._check(self.rt.cudaMemcpy(ptr, arr.ctypes.data, arr.nbytes, self.rt.cudaMemcpyKind.cudaMemcpyHostToDevice))
        return (ptr, arr.shape, arr.dtype)

    def empty(self, shape, dtype):
        import numpy as np

        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return (self._check(self.rt.cudaMalloc(max(nbytes, 1))), shape, np.dtype(dtype))

    def address(self, buf) -> int:
        return int(buf[0])

    def free(self, buf) -> None:
        self._check(self.rt.cudaFree(buf[0]))

    def stream(self):
        return self._check(self.rt.cudaStreamCreate())

    def stream_handle(self, s) -> int:
        return int(s)

    def synchronize(self, s) -> None:
        self._check(self.rt.cudaStreamSynchronize(s))
        self._check(self.rt.cudaStreamDestroy(s))

    def download(self, buf):
        import numpy as np

        ptr, shape, dtype = buf
        out = np.empty(shape, dtype)
        self._check(self.rt.cudaMemcpy(out.ctypes.data, ptr, out.nbytes, self.rt.cudaMemcpyKind.cudaMemcpyDeviceToHost))
        self._check(self.rt.cudaFree(ptr))
        return out
