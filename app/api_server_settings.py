"""Settings → "Local API server": on/off, port, the URL, the API key (read-only, Copy, New key),
whether API conversations are kept in the chat list and API programs may use the memory and read
the documents, CORS origins, and access from other computers (asked for twice). The window runs
the server (app/api_server.py)."""

from __future__ import annotations

import socket

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QCheckBox, QFormLayout, QGroupBox, QHBoxLayout, QLabel, QLineEdit, QMessageBox,
                               QPushButton, QSpinBox)

from app.i18n import tr
from engine.api import Settings
from engine.server import client_url, is_loopback, load_api_key, new_api_key

WILDCARD = "0.0.0.0"


def bad_origins(text: str) -> list[str]:
    """Origins the server would refuse: each is `*` or scheme://host[:port]."""
    return [o for o in text.replace(",", " ").split() if o != "*" and "://" not in o]


class ApiServerSection(QGroupBox):
    """The section's widgets; `save(settings)` writes them. `key_changed`: "New key" replaced the
    stored key (at once, after a confirmation), so a running server must start again."""

    def __init__(self, settings: Settings, status: str = "", parent=None):
        super().__init__(tr("Local API server"), parent)
        self.setObjectName("apiServerSection")
        self.key_changed = False
        self._host = settings.get("server.host")
        form = QFormLayout(self)

        self.enabled = QCheckBox(tr("Serve an OpenAI-compatible API to programs on this computer"))
        self.enabled.setObjectName("apiServerEnabled")
        self.enabled.setChecked(settings.get("server.enabled"))
        self.enabled.toggled.connect(self._on_enabled)
        form.addRow(self.enabled)

        self.port = QSpinBox()
        self.port.setObjectName("apiServerPort")
        self.port.setRange(0, 65535)
        self.port.setSpecialValueText(tr("any free port"))
        self.port.setValue(settings.get("server.port"))
        self.port.valueChanged.connect(self._update_url)
        form.addRow(tr("Port"), self.port)

        self.url = QLabel()
        self.url.setObjectName("apiServerUrl")
        self.url.setWordWrap(True)
        self.url.setTextInteractionFlags(Qt.TextSelectableByMouse)
        form.addRow(tr("Address"), self.url)
        self.status = QLabel(status)
        self.status.setObjectName("apiServerStatus")
        self.status.setWordWrap(True)
        form.addRow(tr("Now"), self.status)

        self.key = QLineEdit(load_api_key(create=False) or "")
        self.key.setObjectName("apiServerKey")
        self.key.setReadOnly(True)
        self.key.setPlaceholderText(tr("made when the server is first turned on"))
        self.copy_key = QPushButton(tr("Copy"))
        self.copy_key.setObjectName("apiServerCopyKey")
        self.copy_key.clicked.connect(self._copy_key)
        self.new_key = QPushButton(tr("New key…"))
        self.new_key.setObjectName("apiServerNewKey")
        self.new_key.clicked.connect(self._new_key)
        row = QHBoxLayout()
        row.addWidget(self.key, 1)
        row.addWidget(self.copy_key)
        row.addWidget(self.new_key)
        form.addRow(tr("API key"), row)

        self.store = QCheckBox(tr("Store API conversations in my chat list"))
        self.store.setObjectName("apiServerStore")
        self.store.setChecked(settings.get("server.store_conversations"))
        form.addRow(self.store)

        # Off by default: a client asking for the memory (x_memory) is not the user agreeing.
        self.memory = QCheckBox(tr("Let API programs use my memory (recall, and “remember that …”)"))
        self.memory.setObjectName("apiServerMemory")
        self.memory.setChecked(settings.get("server.allow_memory"))
        form.addRow(self.memory)

        # Off by default, for the same reason: x_docs hands a client the documents' text and names.
        self.docs = QCheckBox(tr("Let API programs read my documents"))
        self.docs.setObjectName("apiServerDocs")
        self.docs.setChecked(settings.get("server.allow_docs"))
        form.addRow(self.docs)

        self.cors = QLineEdit(settings.get("server.cors_origins"))
        self.cors.setObjectName("apiServerCors")
        self.cors.setPlaceholderText(tr("e.g. http://localhost:3000 (empty: no web page may call it)"))
        form.addRow(tr("Web pages allowed (CORS)"), self.cors)

        self.network = QCheckBox(tr("Allow other computers on the network"))
        self.network.setObjectName("apiServerNetwork")
        self.network.setToolTip(tr("They still need the API key."))
        self.network.setChecked(settings.get("server.allow_network") and not is_loopback(self._host))
        self.network.clicked.connect(self._on_network)
        self.network.toggled.connect(self._update_url)
        form.addRow(self.network)
        self._update_url()
        self._on_enabled(self.enabled.isChecked())

    def confirm(self, title: str, text: str) -> bool:
        """Asks Yes/No (tests replace it)."""
        return QMessageBox.question(self, title, text) == QMessageBox.Yes

    def _on_enabled(self, on: bool) -> None:
        if on and not self.key.text():
            self.key.setText(load_api_key(create=True))  # made when the server is first turned on
        for widget in (self.copy_key, self.new_key):
            widget.setEnabled(bool(self.key.text()))

    def _on_network(self, checked: bool) -> None:
        if checked and not self.confirm(tr("Allow other computers"), tr(
                "Programs on other computers on your network will be able to use your models and read the "
                "conversations they start, if they have the API key. Only do this on a network you trust. "
                "Allow it?")):
            self.network.setChecked(False)

    def _copy_key(self) -> None:
        from PySide6.QtGui import QGuiApplication

        QGuiApplication.clipboard().setText(self.key.text())

    def _new_key(self) -> None:
        if self.confirm(tr("New API key"), tr("Programs that use the current key will be refused until they "
                                              "get the new one. Make a new key?")):
            self.key.setText(new_api_key())
            self.key_changed = True

    def host(self) -> str:
        """Where the server is to listen: loopback, or every address when other computers may call."""
        if self.network.isChecked():
            return self._host if not is_loopback(self._host) else WILDCARD
        return self._host if is_loopback(self._host) else "127.0.0.1"

    def _update_url(self) -> None:
        port = self.port.value()
        text = client_url(self.host(), port) if port else tr("chosen when the server starts")
        if self.network.isChecked() and port:
            name = self._host if self.host() != WILDCARD else socket.gethostname()
            text += "\n" + tr("Other computers: {url}").format(url=client_url(name, port))
        self.url.setText(text)

    def problem(self) -> str | None:
        """Why the values cannot be saved (in the UI's language), or None."""
        bad = bad_origins(self.cors.text())
        if bad:
            return tr("Each web page origin looks like http://host:port (not: {origins}).").format(
                origins=", ".join(bad))
        return None

    def save(self, s: Settings) -> None:
        s.set("server.enabled", self.enabled.isChecked())
        s.set("server.port", int(self.port.value()))
        s.set("server.store_conversations", self.store.isChecked())
        s.set("server.allow_memory", self.memory.isChecked())
        s.set("server.allow_docs", self.docs.isChecked())
        s.set("server.cors_origins", " ".join(self.cors.text().replace(",", " ").split()))
        s.set("server.allow_network", self.network.isChecked())
        s.set("server.host", self.host())
