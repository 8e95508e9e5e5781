"""Images kept with their messages (engine/chat/image_store.py, migration 0016): files by pixel
digest, owner-only; a message names its images; what no message names can go."""

from __future__ import annotations

import io
import stat

import pytest
from PIL import Image

from engine.inference.images import ImageError
from engine.storage.db import Database
from engine.chat.image_store import ImageStore


def png(colour) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (24, 16), colour).save(out, "PNG")
    return out.getvalue()


def test_an_image_is_kept_once_by_its_pixels_owner_only(tmp_path):
    store = ImageStore(tmp_path / "images")
    first = store.add(png((1, 2, 3)))
    again = store.add(png((1, 2, 3)))
    digest = first.pixels.digest
    assert again.pixels.digest == digest and [p.name for p in (tmp_path / "images").iterdir()] == [f"{digest}.png"]
    path = store.path(digest)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert store.load(digest).pixels == first.pixels
    with pytest.raises(ImageError, match="not an image format"):
        store.add(b"not a picture")
    assert len(list((tmp_path / "images").iterdir())) == 1  # nothing kept of what was refused
    path.write_bytes(png((9, 9, 9)))  # changed behind our back: said, not used as the old one
    with pytest.raises(ImageError, match="changed on disk"):
        store.load(digest)
    store.remove({digest})
    with pytest.raises(ImageError, match="no longer"):
        store.load(digest)
    with pytest.raises(ValueError):
        store.path("../../etc/passwd")


def test_a_message_names_its_images_and_the_ones_in_use_are_found(tmp_path):
    db = Database(tmp_path / "a.db")
    a, b = db.create_conversation(), db.create_conversation()
    cat, dog = "c" * 64, "d" * 64
    db.add_message(a, "user", "look at these", images=[{"digest": cat, "at": 0}, {"digest": dog, "at": 8}])
    db.add_message(b, "user", "and this", images=[{"digest": cat, "at": 0}])
    db.add_message(b, "assistant", "a cat")
    rows = db.messages(a)
    assert rows[0]["images"] == [{"digest": cat, "at": 0}, {"digest": dog, "at": 8}]
    assert db.messages(b)[1]["images"] is None
    assert db.conversation_images(a) == {cat, dog} and db.conversation_images(b) == {cat}
    db.delete_conversation(a)
    assert db.images_in_use({cat, dog}) == {cat}  # the dog was only in the deleted chat
    assert db.images_in_use(set()) == set()
