"""The window's style sheet: calm colours, readable bubbles, status colours for tool cards."""

STYLE = """
QWidget#sidebar { background: #f3f4f6; }
QPushButton#newChat { padding: 8px; font-weight: 600; }
QListWidget#conversations { border: none; background: transparent; }
QListWidget#conversations::item { padding: 6px 4px; border-radius: 6px; }
QListWidget#conversations::item:selected { background: #dbeafe; color: #111827; }
QWidget#chatInner { background: #ffffff; }
QFrame#userBubble { background: #2563eb; border-radius: 12px; }
QFrame#userBubble QTextBrowser { color: #ffffff; background: transparent; }
QFrame#assistantBubble QTextBrowser { background: transparent; }
QFrame#assistantBubble { background: #f3f4f6; border-radius: 12px; }
QFrame#toolCard { background: #fffbeb; border: 1px solid #fde68a; border-radius: 8px; }
QFrame#toolCard[status="ok"] { background: #ecfdf5; border-color: #a7f3d0; }
QFrame#toolCard[status="failed"] { background: #fef2f2; border-color: #fecaca; }
QFrame#toolCard[status="denied"] { background: #f5f5f5; border-color: #d4d4d4; }
QFrame#toolCard[status="not-run"] { background: #f5f5f5; border-color: #d4d4d4; }
QFrame#thinking { background: #f9fafb; border: 1px dashed #d1d5db; border-radius: 8px; }
QToolButton#collapsibleToggle { border: none; font-family: monospace; }
QLabel#errorNote { color: #b91c1c; padding: 4px 8px; }
QLabel#infoNote { color: #6b7280; padding: 4px 8px; }
QLabel#warningNote { color: #7c2d12; background: #ffedd5; border: 1px solid #fdba74;
                     border-radius: 6px; padding: 6px 8px; font-weight: 600; }
QFrame#promptProgress { background: #f9fafb; border: 1px dashed #d1d5db; border-radius: 8px; }
QLabel#promptProgressText { color: #374151; }
QLabel#quickOutcomes { color: #374151; }
QLabel#quickNote { color: #7c2d12; background: #ffedd5; border-radius: 6px; padding: 4px 6px; }
QWidget#composer { border-top: 1px solid #e5e7eb; }
QPlainTextEdit#input { border: 1px solid #d1d5db; border-radius: 8px; padding: 4px; }
QPushButton#sendButton { background: #2563eb; color: white; padding: 6px 16px;
                         border-radius: 6px; }
QPushButton#stopButton { background: #dc2626; color: white; padding: 6px 16px;
                         border-radius: 6px; }
QLabel#approvalTitle { font-size: 15px; }
QLabel#approvalSummary { font-size: 16px; font-weight: 600; padding: 2px 0 4px 0; }
QLabel#approvalSources { color: #7c2d12; background: #ffedd5; border: 1px solid #fdba74;
                         border-radius: 6px; padding: 6px; }
QLabel#approvalWhy { color: #4b5563; }
QLabel#scopeCovers { color: #1e3a8a; background: #eff6ff; border-radius: 6px; padding: 6px; }
QToolButton#approvalDetailsToggle { border: none; color: #4b5563; }
QLabel#toolSummary { color: #065f46; }
QLabel#toolUndoFailed { color: #b91c1c; }
QLabel#approvalReceipt { font-family: monospace; background: #f3f4f6; padding: 8px;
                         border-radius: 6px; }
QLabel#approvalError { color: #b91c1c; }
QFrame#quickBox { background: #ffffff; border: 1px solid #cbd5e1; border-radius: 12px; }
QLineEdit#quickLine { font-size: 16px; padding: 8px; border: 1px solid #d1d5db;
                      border-radius: 8px; }
QLabel#quickStatus { color: #6b7280; }
QLabel#quickAnswer { font-size: 14px; padding: 4px 2px; }
QLabel#alarmTitle { font-size: 18px; font-weight: 600; }
QToolButton#approvalsButton { color: #92400e; background: #fef3c7; border: 1px solid #f59e0b;
                              border-radius: 4px; padding: 1px 6px; font-weight: 600; }
QLabel#approvalsOrigin { font-weight: 600; }
QLabel#approvalsWhat { background: #f3f4f6; padding: 8px; border-radius: 6px; }
QListWidget#approvalsList::item { padding: 4px; }
QWidget#missedBanner { background: #fef3c7; border-bottom: 1px solid #f59e0b; }
QLabel#missedText { color: #78350f; background: transparent; }
"""


DARK = """
QWidget { background: #111827; color: #e5e7eb; }
QWidget#sidebar { background: #0b1220; }
QListWidget#conversations::item:selected { background: #1e3a8a; color: #f9fafb; }
QWidget#chatInner { background: #111827; }
QFrame#userBubble { background: #2563eb; border-radius: 12px; }
QFrame#assistantBubble { background: #1f2937; border-radius: 12px; }
QFrame#assistantBubble QTextBrowser { color: #e5e7eb; background: transparent; }
QFrame#toolCard { background: #292524; border: 1px solid #78350f; border-radius: 8px; }
QFrame#toolCard[status="ok"] { background: #052e2b; border-color: #065f46; }
QFrame#toolCard[status="failed"] { background: #3b0d0d; border-color: #7f1d1d; }
QFrame#toolCard[status="denied"] { background: #262626; border-color: #404040; }
QFrame#toolCard[status="not-run"] { background: #262626; border-color: #404040; }
QFrame#thinking { background: #0f172a; border: 1px dashed #374151; border-radius: 8px; }
QPlainTextEdit, QLineEdit { background: #0f172a; color: #e5e7eb; border: 1px solid #374151; }
QLabel#approvalReceipt, QLabel#approvalsWhat { background: #1f2937; }
QLabel#approvalSources { color: #fed7aa; background: #431407; border-color: #9a3412; }
QLabel#approvalWhy, QToolButton#approvalDetailsToggle { color: #9ca3af; }
QLabel#scopeCovers { color: #bfdbfe; background: #172554; }
QLabel#toolSummary { color: #6ee7b7; }
QFrame#quickBox { background: #111827; border: 1px solid #374151; }
QCheckBox::indicator { width: 13px; height: 13px; border: 1px solid #9ca3af; border-radius: 3px;
                       background: #0f172a; }
QCheckBox::indicator:checked { background: #3b82f6; border-color: #93c5fd; }
QToolButton#approvalsButton { color: #fde68a; background: #451a03; border-color: #b45309; }
QLabel#warningNote, QLabel#quickNote { color: #fed7aa; background: #431407; border-color: #9a3412; }
QFrame#promptProgress { background: #0f172a; border-color: #374151; }
QLabel#promptProgressText, QLabel#quickOutcomes { color: #d1d5db; }
QWidget#missedBanner { background: #451a03; border-bottom: 1px solid #b45309; }
QLabel#missedText { color: #fde68a; }
"""


def style_for(theme: str, system_is_dark: bool) -> str:
    """The style sheet for ``theme`` (system, light or dark)."""
    dark = theme == "dark" or (theme == "system" and system_is_dark)
    return STYLE + DARK if dark else STYLE
