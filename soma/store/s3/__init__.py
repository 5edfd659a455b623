"""The store on an S3-compatible bucket: the backend (`backend.S3Backend`, what `s3://` URLs
open: soma.store.backend.BACKENDS) and the parts only it uses: its requests and what it
retries (`requests`), its reads straight into one buffer (`reads`), its garbage collection
(`gc`), and the local bucket `soma bucket serve` runs for a site without one (`local_bucket`).

Why a package of its own: a backend is one sub-package plus one entry in `BACKENDS` and one
in the contract suite's `KINDS` (docs/explanation/backend.md). Nothing here is imported
before an `s3://` store is opened or a bucket served (boto3 is an optional extra).
"""
