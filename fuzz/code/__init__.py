"""Code compared as code: definitions and their digests (codediff), the sync-relevant part of a change
(syncdiff). Pure Python (ast); read by the release tooling and by reach, so below both."""
