"""The torch-free records: the report model (model), the verdicts and their precedence (verdicts), reach
data (reachdata). merge-reports, trend and the renderers read them where no GPU stack is installed
(lint-imports: no torch, no numpy)."""
