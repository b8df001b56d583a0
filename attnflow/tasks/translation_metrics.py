"""Translation metrics on detokenised text: corpus BLEU (sacreBLEU) and word error rate (jiwer).

Source: Papineni et al. 2002 (BLEU); Post 2018 (sacreBLEU: BLEU on detokenised
text with its own tokenisation, reported with a signature that pins every setting).

BLEU = BP · exp(Σ_{n=1..4} ¼ log p_n), p_n the clipped n-gram precision over the corpus,
BP = min(1, exp(1 − r/c)) (r reference length, c hypothesis length); sacreBLEU's defaults:
13a tokenisation, exponential smoothing, case-sensitive. ``lowercase=True`` gives the
case-insensitive score that common tutorials report on tokenised lower-cased text (their
numbers are on spaCy/Moses-tokenised text; 13a tokenisation splits punctuation the same way, so
the two agree closely but not exactly).

WER = (S + D + I) / N over the corpus: word substitutions, deletions and insertions of the
minimal alignment of each hypothesis to its reference, divided by the reference word count.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple, Union


def reference_streams(references: Sequence[Union[str, Sequence[str]]]) -> List[List[str]]:
    """sacreBLEU's reference streams (stream k = every sentence's k-th reference) from one
    reference per sentence, or a list of them (captions: several per image). A sentence with
    fewer references repeats its last one: BLEU clips n-gram counts by the maximum over
    references and takes the closest reference length, so a repeated reference changes nothing."""
    refs = [[r] if isinstance(r, str) else list(r) for r in references]
    if any(not r for r in refs):
        raise ValueError("every sentence needs at least one reference")
    k = max((len(r) for r in refs), default=1)
    return [[r[min(i, len(r) - 1)] for r in refs] for i in range(k)]


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[Union[str, Sequence[str]]],
                lowercase: bool = False) -> Tuple[float, str]:
    """(BLEU in [0, 100], sacreBLEU signature) of a corpus with one reference per sentence, or a
    list of references per sentence (multi-reference BLEU)."""
    from sacrebleu.metrics import BLEU

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    metric = BLEU(lowercase=lowercase)
    score = metric.corpus_score(list(hypotheses), reference_streams(references))
    return float(score.score), str(metric.get_signature())


def word_error_rate(hypotheses: Sequence[str], references: Sequence[Union[str, Sequence[str]]]
                    ) -> float:
    """Corpus WER: total word edits / total reference words (pairs with an empty reference are
    skipped: their rate is undefined). With several references per sentence, against the first."""
    import jiwer

    references = [r if isinstance(r, str) else r[0] for r in references]
    pairs = [(h, r) for h, r in zip(hypotheses, references) if r.strip()]
    if not pairs:
        return 0.0
    hyps: List[str] = [h if h.strip() else "" for h, _ in pairs]
    out = jiwer.process_words([r for _, r in pairs], hyps)
    return float(out.wer)
