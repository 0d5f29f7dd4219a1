"""The ``compressed`` input kind: ``sensor_msgs/CompressedImage`` (JPEG or PNG, as
image_transport's ``compressed`` plugin publishes it on ``<camera>/image_raw/compressed``) -> one
image input of the model.

**The format string.** image_transport's compressed publisher writes ``<encoding>; <codec>
compressed <target>``: ``rgb8; jpeg compressed bgr8``, ``mono8; jpeg compressed mono8``,
``bgr8; png compressed bgr8``, ``mono8; png compressed `` (PNG of a mono image names no
target); older publishers write a plain ``jpeg`` or ``png``. What it means for the pixels is what
its subscriber (``compressed_subscriber.cpp``) makes of it: a colour image whose format says
``compressed bgr...`` was handed to the encoder in BGR order, so the file holds its true colours;
a colour image with any other target was handed over in RGB order, so the file's red and blue are
swapped; a plain ``jpeg``/``png`` (no ``;``) holds true colours. :func:`parse_format` reads that
once per distinct string. 8- and 16-bit encodings (``rgb8`` ... ``mono16``) are read into 8-bit
pixels; anything else (``compressedDepth``, TIFF, Bayer or float encodings, data that is neither
JPEG nor PNG) is unsupported: :class:`~triton_ros.ros.codec.preprocess.MalformedImage`, counted
as ``dropped_malformed`` like a corrupt or truncated image.

**Decoding.** JPEG with simplejpeg (libjpeg-turbo's TurboJPEG API, https://gitlab.com/jfolz/
simplejpeg): faster than OpenCV's ``cv2.imdecode``, it runs without the GIL (header and pixels),
takes the message's bytes without a copy, and reports truncated or corrupt data as an error where
``cv2.imdecode`` returns a grey-filled image. It decodes straight into the
channel order the model wants (``RGB``, ``BGR`` or ``GRAY``: no conversion pass afterwards).
PNG with OpenCV's ``cv2.imdecode`` (which releases the GIL too); where simplejpeg is not
installed, JPEG takes that path as well (full size, with a warning once). Both run in the
binding's worker threads, never in the executor's callback (:attr:`CompressedImageInput.
encode_on_workers`), so that decoding spreads over cores instead of serializing the node.

**Reduced-size decoding.** libjpeg decodes at 1/2, 1/4 or 1/8 of the size for a fraction of the
work (its scaled IDCT). When the model's input is much smaller than the image, the largest
reduction that keeps the decoded image at least the model's input size in both dimensions is
used (:func:`reduction`): a 1920x1080 JPEG for a 256x256 input decodes at 480x270, never at full
size. The placement handed to the decoders (a
:class:`~triton_ros.ros.codec.preprocess.Letterbox`) maps back to the source's full pixels
(decoded pixel ``x`` covers source pixels ``[x*s, (x+1)*s)``), so boxes and masks are in the
camera's own pixels whatever the reduction. Binding parameter ``reduced_decoding`` false turns
it off.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields
from typing import Any, Callable

import numpy as np

try:
    import cv2
except ImportError:  # pragma: no cover - a requirement
    cv2 = None

from ...settings import setting
from ..targets.spec import TensorSpec
from .base import ImageGeometry, InputKind
from .headers import JPEG_MAGIC, HeaderError, encoded_size, pixel_limit_text
from .headers import PNG_SIGNATURE as PNG_MAGIC
from .preprocess import (
    InputPlan,
    Letterbox,
    MalformedImage,
    PreprocessConfig,
    Preprocessor,
    plan_input,
)
from .serialized_image import COMPRESSED_IMAGE_TYPE, CompressedImageReader

REDUCTIONS = (8, 4, 2)  # libjpeg's fast scaled decodings, largest first
# image_transport's source encodings whose pixels a JPEG or PNG of 8 or 16 bits holds
_COLOR = ("rgb8", "bgr8", "rgba8", "bgra8", "rgb16", "bgr16", "rgba16", "bgra16")
_MONO = ("mono8", "mono16", "8UC1")
_FORMAT_CACHE_SIZE = 64


@dataclass(frozen=True)
class CompressedFormat:
    """What a CompressedImage's ``format`` says about its pixels."""

    encoding: str  # the source image's encoding ("" for a plain format)
    swapped: bool  # the file's red and blue are swapped (an RGB target)


def parse_format(text: str) -> CompressedFormat:
    """Read a ``format`` string as image_transport's compressed subscriber does; raise
    MalformedImage for one the node does not decode."""
    fmt = text.strip()
    if ";" not in fmt:  # plain "jpeg", "png" (or nothing): true colours
        if fmt.lower() not in ("", "jpeg", "jpg", "png"):
            raise MalformedImage(
                f"unsupported format '{text}' (supported: JPEG and PNG, "
                f"as image_transport's compressed transport writes them)"
            )
        return CompressedFormat("", False)
    encoding, _, rest = (part.strip() for part in fmt.partition(";"))
    if "compresseddepth" in rest.lower():
        raise MalformedImage(
            f"format '{text}' is image_transport's compressedDepth; this "
            f"binding reads colour and mono images"
        )
    words = rest.lower().split()
    if not words or words[0] not in ("jpeg", "png"):
        raise MalformedImage(
            f"unsupported format '{text}' (supported: jpeg and png compressed images)"
        )
    if encoding in _MONO:
        return CompressedFormat(encoding, False)
    if encoding not in _COLOR:
        raise MalformedImage(
            f"unsupported encoding '{encoding}' in format '{text}' "
            f"(supported: {', '.join(_COLOR + _MONO)})"
        )
    return CompressedFormat(encoding, "compressed bgr" not in rest.lower())


def reduction(width: int, height: int, model_width: int, model_height: int) -> int:
    """The largest of 8, 4, 2 (else 1) by which a ``width`` x ``height`` JPEG may be reduced
    while still decoding to at least ``model_width`` x ``model_height``."""
    for s in REDUCTIONS:
        if -(-width // s) >= model_width and -(-height // s) >= model_height:
            return s
    return 1


@dataclass(frozen=True)
class CompressedConfig(PreprocessConfig):
    """A compressed input's settings: the preprocessing of the decoded image, and whether JPEGs
    may be decoded at a reduced size."""

    reduced_decoding: bool = setting(
        True,
        "Compressed inputs: decode a JPEG at 1/2, 1/4 or 1/8 of its size when that is "
        "still at least the model's input size (libjpeg's scaled decoding; boxes and "
        "masks stay in the source's full pixels).",
    )


@dataclass(frozen=True)
class CompressedPlan(InputPlan):
    """The compressed kind's plan: the preprocessing of the decoded image (an
    :class:`~triton_ros.ros.codec.preprocess.InputPlan`, as the output formats read it), and
    whether JPEGs may be decoded at a reduced size."""

    reduced_decoding: bool = True

    @property
    def summary(self) -> str:
        return f"{super().summary}, from JPEG/PNG" + (
            " (reduced-size JPEG decoding)" if self.reduced_decoding else ""
        )


class CompressedImageInput(InputKind):
    """``sensor_msgs/CompressedImage`` in."""

    name = "compressed"
    ros_type = COMPRESSED_IMAGE_TYPE
    settings = CompressedConfig
    # Decoding costs milliseconds: on the workers, whatever preprocess_in_callback says.
    encode_on_workers = True

    def __init__(self) -> None:
        self._formats: dict[str, CompressedFormat] = {}
        self._lock = threading.Lock()

    def message_class(self) -> type:
        from sensor_msgs.msg import CompressedImage

        return CompressedImage

    def reader(self) -> CompressedImageReader:
        return CompressedImageReader()

    def format_of(self, text: str) -> CompressedFormat:
        """:func:`parse_format`, once per distinct string."""
        parsed = self._formats.get(text)
        if parsed is None:
            parsed = parse_format(text)
            with self._lock:
                if len(self._formats) >= _FORMAT_CACHE_SIZE:
                    self._formats.clear()
                self._formats[text] = parsed
        return parsed

    def check(self, msg: Any) -> None:
        self.format_of(msg.format)
        head = bytes(memoryview(msg.data)[:8])
        if not head:
            raise MalformedImage("empty data")
        if not (head.startswith(JPEG_MAGIC) or head == PNG_MAGIC):
            raise MalformedImage(
                f"data is neither JPEG nor PNG (starts with {head.hex()}; format '{msg.format}')"
            )

    def decoded_size(self, msg: Any) -> tuple[int, int]:
        try:
            return encoded_size(msg.data)
        except HeaderError as exc:
            raise MalformedImage(f"{exc} (format '{msg.format}')") from None

    def plan(
        self,
        settings: CompressedConfig,
        tensor: TensorSpec,
        *,
        model: str,
        image: ImageGeometry | None = None,
    ) -> CompressedPlan:
        plan = plan_input(settings, tensor, model=model)
        return CompressedPlan(
            **{f.name: getattr(plan, f.name) for f in fields(plan)},
            reduced_decoding=settings.reduced_decoding,
        )

    def encoder(self, plan: CompressedPlan) -> Callable[[Any], tuple[np.ndarray, Letterbox]]:
        decoder = Decoder(plan)

        def encode(msg: Any) -> tuple[np.ndarray, Letterbox]:
            return decoder(msg.data, self.format_of(msg.format))

        return encode


class Decoder:
    """Compressed bytes -> (model input tensor, Letterbox in the source's full pixels), for one
    plan; thread-safe (each thread decodes into buffers of its own)."""

    def __init__(self, plan: CompressedPlan) -> None:
        self.plan = plan
        self._preprocess = Preprocessor(plan)
        self._local = threading.local()
        self._jpeg = _simplejpeg()

    def __call__(self, data: Any, fmt: CompressedFormat) -> tuple[np.ndarray, Letterbox]:
        buf = np.frombuffer(data, np.uint8)
        if bytes(buf[:3]) == JPEG_MAGIC and self._jpeg is not None:
            image, encoding, factor, width, height = self._decode_jpeg(buf, fmt)
        else:
            image, encoding = self._decode_opencv(buf, fmt)
            factor, width, height = 1, image.shape[1], image.shape[0]
        h, w = image.shape[:2]
        tensor, box = self._preprocess(image.reshape(-1), encoding, h, w, image.strides[0])
        if factor == 1 and (w, h) == (width, height):
            return tensor, box
        return tensor, Letterbox(
            width, height, box.scale_x / factor, box.scale_y / factor, box.pad_x, box.pad_y
        )

    def _target(self, fmt: CompressedFormat) -> tuple[str, str]:
        """(decoder channel order, the encoding it then is), for the model's channels."""
        plan = self.plan
        if plan.channels == 1 and not fmt.swapped:
            return "GRAY", "mono8"
        want = "rgb" if plan.channels == 1 else plan.color
        if fmt.swapped:  # the file's R is the true B: ask for the other order
            return ("BGR" if want == "rgb" else "RGB"), f"{want}8"
        return want.upper(), f"{want}8"

    def _decode_jpeg(self, buf: np.ndarray, fmt: CompressedFormat):
        jpeg = self._jpeg
        order, encoding = self._target(fmt)
        try:
            height, width, _, _ = jpeg.decode_jpeg_header(buf)
            _check_size(width, height)
            factor = 1
            if self.plan.reduced_decoding:
                factor = reduction(width, height, self.plan.width, self.plan.height)
            dh, dw = -(-height // factor), -(-width // factor)
            out = self._buffer((dh, dw, 1 if order == "GRAY" else 3))
            if factor == 1:
                image = jpeg.decode_jpeg(buf, order, buffer=out)
            else:
                image = jpeg.decode_jpeg(
                    buf, order, min_height=dh, min_width=dw, min_factor=factor, buffer=out
                )
        except ValueError as exc:  # corrupt, truncated or not a JPEG libjpeg decodes
            raise MalformedImage(f"JPEG does not decode ({buf.size} bytes): {exc}") from None
        if image.shape[:2] != (dh, dw):
            raise RuntimeError(
                f"simplejpeg decoded {image.shape[1]}x{image.shape[0]} where "
                f"{dw}x{dh} (1/{factor} of {width}x{height}) was asked"
            )
        return image, encoding, factor, width, height

    def _decode_opencv(self, buf: np.ndarray, fmt: CompressedFormat):
        order, encoding = self._target(fmt)
        if bytes(buf[:8]) == PNG_MAGIC and buf.size >= 24:
            # IHDR, the first chunk by the PNG specification: width and height at bytes 16-23
            _check_size(
                int.from_bytes(bytes(buf[16:20]), "big"), int.from_bytes(bytes(buf[20:24]), "big")
            )
        flag = cv2.IMREAD_GRAYSCALE if order == "GRAY" else cv2.IMREAD_COLOR
        try:
            image = cv2.imdecode(buf, flag)
        except cv2.error as exc:
            raise MalformedImage(f"image does not decode ({buf.size} bytes): {exc}") from None
        if image is None or image.size == 0:
            raise MalformedImage(
                f"image does not decode ({buf.size} bytes; corrupt, truncated or not JPEG/PNG)"
            )
        if order == "RGB":  # OpenCV decodes in BGR order
            image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
        return image, encoding

    def _buffer(self, shape: tuple[int, int, int]) -> np.ndarray:
        """This thread's output buffer of ``shape`` (a fresh megabyte per frame would cost a
        page fault per page): it is read by the preprocessing that follows on the same
        thread before the next decode overwrites it."""
        kept = getattr(self._local, "buffer", None)
        if kept is None or kept.shape != shape:
            kept = self._local.buffer = np.empty(shape, np.uint8)
        return kept


def _check_size(width: int, height: int) -> None:
    refused = pixel_limit_text(width, height)  # checked before too (codec/base.check_input)
    if refused is not None:
        raise MalformedImage(refused)


_WARNED = threading.Event()


def _simplejpeg():
    """simplejpeg, or None (JPEG then decodes with OpenCV, at full size) with a warning once."""
    try:
        import simplejpeg
    except ImportError as exc:  # an apt-installed ROS 2 without it
        if not _WARNED.is_set():
            _WARNED.set()
            import logging

            logging.getLogger(__name__).warning(
                f"{exc}: JPEG images decode with OpenCV, at full size (pip install "
                f"simplejpeg for faster and reduced-size decoding)"
            )
        return None
    return simplejpeg


COMPRESSED = CompressedImageInput()
