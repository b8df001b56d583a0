"""Translation metrics on detokenised text: corpus BLEU (sacreBLEU) and word error rate (jiwer).

BLEU = BP · exp(Σ_{n=1..4} ¼ log p_n), p_n the clipped n-gram precision, BP = min(1, exp(1 − r/c))
(Papineni et al. 2002), with sacreBLEU's defaults (Post 2018). WER = (S + D + I) / N over the
corpus: word edits of each minimal alignment over the reference words.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple, Union

import jiwer
from sacrebleu.metrics import BLEU


def reference_streams(references: Sequence[Union[str, Sequence[str]]]) -> List[List[str]]:
    """sacreBLEU's reference streams (stream k: every sentence's k-th reference); a sentence
    with fewer references repeats its last one, which changes no BLEU."""
    refs = [[r] if isinstance(r, str) else list(r) for r in references]
    if any(not r for r in refs):
        raise ValueError("every sentence needs at least one reference")
    k = max((len(r) for r in refs), default=1)
    return [[r[min(i, len(r) - 1)] for r in refs] for i in range(k)]


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[Union[str, Sequence[str]]],
                lowercase: bool = False) -> Tuple[float, str]:
    """(BLEU in [0, 100], sacreBLEU signature) of a corpus with one reference per sentence, or a
    list of references per sentence (multi-reference BLEU)."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    metric = BLEU(lowercase=lowercase)
    score = metric.corpus_score(list(hypotheses), reference_streams(references))
    return float(score.score), str(metric.get_signature())


def word_error_rate(hypotheses: Sequence[str], references: Sequence[Union[str, Sequence[str]]]
                    ) -> float:
    """Corpus WER: total word edits / total reference words (pairs with an empty reference are
    skipped: their rate is undefined). With several references per sentence, against the first."""
    references = [r if isinstance(r, str) else r[0] for r in references]
    pairs = [(h, r) for h, r in zip(hypotheses, references) if r.strip()]
    if not pairs:
        return 0.0
    hyps: List[str] = [h if h.strip() else "" for h, _ in pairs]
    out = jiwer.process_words([r for _, r in pairs], hyps)
    return float(out.wer)
