"""Video files and an on-screen window for ``rlfast watch``.

Frames go to an mp4 (imageio with imageio-ffmpeg, which ships its own ffmpeg binary) or a
gif (imageio with pillow) one at a time as they are rendered, so a long episode never
holds its frames in memory; ``_Window`` shows them with OpenCV (a core dependency) at the
environment's frame rate. ``check_display`` refuses a window on a machine without one.
"""
from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from rlfast.utils.checks import check_positive

__all__ = ["VideoWriter", "check_display", "VIDEO_FORMATS", "PlaybackError"]

VIDEO_FORMATS = (".mp4", ".gif")
_VIDEO_EXTRA = "pip install rlfast[video]"


class PlaybackError(ValueError):
    """Playing an agent back cannot go ahead as asked: the snapshot does not fit the run's
    agent, the environment draws no frames, no display for a window, no video writer, ..."""


class VideoWriter:
    """Writes frames to an mp4 (ffmpeg, from imageio-ffmpeg) or gif (Pillow) file as they come,
    so that a long episode never sits in memory. Use ``append(frame)``, then ``close()``.

    mp4: every appended frame is one video frame (``count`` of them), padded at the bottom and
    right to even sizes (H.264's yuv420p needs them; no rescaling). gif: Pillow merges a frame
    identical to the one before it into that one (their durations add up), so the file may hold
    fewer frames, while its total duration stays ``count / fps``; GIF delays are whole
    hundredths of a second, so pick an fps that divides 100 for exact timing.
    """

    def __init__(self, path: str | os.PathLike, fps: float) -> None:
        self.path = os.fspath(path)
        self.fps = check_positive(fps, "fps")
        self.format = _video_format(self.path)
        iio = _import_video_writer(self.format)
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        if self.format == ".mp4":
            self._writer = iio.get_writer(self.path, format="FFMPEG", mode="I", fps=self.fps,
                                          codec="libx264", macro_block_size=1,
                                          ffmpeg_log_level="error")
        else:
            self._writer = iio.get_writer(self.path, format="GIF", mode="I",
                                          duration=1000.0 / self.fps, loop=0)
        self.count = 0
        self.shape: tuple | None = None

    def append(self, frame: np.ndarray) -> None:
        """Write one RGB ``uint8`` frame; every frame must have the first one's shape."""
        frame = np.asarray(frame, dtype=np.uint8)
        if self.shape is None:
            self.shape = frame.shape
        elif frame.shape != self.shape:
            raise PlaybackError(f"frame {self.count} has shape {frame.shape}, the first had "
                                f"{self.shape}; a video needs one frame size")
        if self.format == ".mp4" and (frame.shape[0] % 2 or frame.shape[1] % 2):
            frame = np.pad(frame, ((0, frame.shape[0] % 2), (0, frame.shape[1] % 2), (0, 0)),
                           mode="edge")
        self._writer.append_data(frame)
        self.count += 1

    def close(self) -> None:
        """Finish the file (safe to call twice)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def _video_format(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext not in VIDEO_FORMATS:
        raise PlaybackError(f"--video {path}: the file must end in {' or '.join(VIDEO_FORMATS)}")
    return ext


def _import_video_writer(fmt: str) -> Any:
    """``imageio.v2``, after checking the writer for ``fmt`` is installed."""
    try:
        import imageio.v2 as iio
        if fmt == ".mp4":
            import imageio_ffmpeg  # noqa: F401  (ships the ffmpeg binary)
        else:
            import PIL  # noqa: F401
    except ImportError as e:
        raise PlaybackError(f"writing {fmt} videos needs imageio, imageio-ffmpeg (mp4) and "
                            f"pillow (gif), which are not installed ({e}): {_VIDEO_EXTRA}"
                            ) from None
    return iio


class _Window:
    """Shows frames in an OpenCV window at ``fps``; q or Esc closes it (``closed`` is set and
    :class:`_WindowClosed` raised to stop the episodes)."""

    def __init__(self, title: str, fps: float) -> None:
        import cv2
        self._cv2 = cv2
        self.title = title
        self.delay_ms = max(1, int(round(1000.0 / fps)))
        self.count = 0
        try:
            cv2.namedWindow(title, cv2.WINDOW_AUTOSIZE)
        except cv2.error as e:
            raise PlaybackError(f"OpenCV cannot open a window here ({str(e).strip()}); pass "
                                f"--video out.mp4 to write a video instead") from None

    def append(self, frame: np.ndarray) -> None:
        """Show one RGB frame, then wait one frame time."""
        self._cv2.imshow(self.title, np.ascontiguousarray(frame[..., ::-1]))  # RGB -> BGR
        self.count += 1
        key = self._cv2.waitKey(self.delay_ms) & 0xFF
        if key in (27, ord("q")):
            raise _WindowClosed

    def close(self) -> None:
        """Close the window."""
        self._cv2.destroyWindow(self.title)
        self._cv2.waitKey(1)


class _WindowClosed(Exception):
    """The user closed the playback window (q or Esc)."""


def check_display() -> None:
    """Refuse (PlaybackError) to open a window on a Linux machine without a display."""
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY")
                                                 or os.environ.get("WAYLAND_DISPLAY")):
        raise PlaybackError("no display to show the episodes on (neither DISPLAY nor "
                            "WAYLAND_DISPLAY is set); pass --video out.mp4 (or out.gif) to "
                            "write them to a file")


# ---- the command line --------------------------------------------------------------------------
