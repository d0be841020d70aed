"""The person's documents, indexed in full text and searched by the assistant (search_documents)."""

from botpsy_desktop.adapters.documents.index import INDEX_NAME, DocumentIndex
from botpsy_desktop.adapters.documents.tools import documents_tools

__all__ = ["INDEX_NAME", "DocumentIndex", "documents_tools"]
