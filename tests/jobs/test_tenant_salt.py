"""The stages hand the engine the document's tenant as its prefix-cache salt: two tenants' identical crops are
recognised apart, and neither reuses the KV blocks the other's filled."""

from __future__ import annotations

import uuid

from sqlalchemy import select

from pipeline.db.models import Page, Region
from pipeline.db.session import session_scope
from tests.documents.samples import build_pdf, stream_object
from tests.jobs.conftest import accept, wait_until_final
from workers.embedded import EmbeddedWorkers
from workers.engine_host import EngineHost

# One line of text: one region, so nothing of the tenant's own fills the cache before that region's request.
ONE_LINE = build_pdf(["/MediaBox [0 0 612 792] /Resources << /Font << /F1 9 0 R >> >> /Contents 10 0 R"],
                     {9: "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
                      10: stream_object(b"BT /F1 28 Tf 72 700 Td (The same letterhead) Tj ET")})


def test_two_tenants_identical_crops_share_no_prefix_cache_blocks(service: EmbeddedWorkers,
                                                                  engine_host: EngineHost) -> None:
    tenants = [f"salt-{uuid.uuid4().hex[:8]}" for _ in range(2)]  # fresh salts: the engine is the session's
    cached_tokens = {}
    for tenant in tenants:
        document_id = accept(service, ONE_LINE, "letterhead.pdf", tenant=tenant)
        assert wait_until_final(service, document_id).status == "succeeded"
        with session_scope(service.context.db) as session:
            cached_tokens[tenant] = session.scalars(select(Region.cached_tokens).join(Page)
                                                    .where(Page.document_id == document_id)).all()
        assert tenant in {key.salt for _, key in engine_host.engine.pool.keys.values()}
    assert cached_tokens == {tenant: [0] for tenant in tenants}  # the second found none of the first's blocks
