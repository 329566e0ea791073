"""The data stage: raw web-like documents -> compliant, filtered, deduplicated multilingual corpus.

Blocks are datatrove pipeline steps (one class each, stats counted per reason), composed by
`apertus.data.pipeline` and scheduled by `workflow/rules/data.smk` (RECIPE.md §5).

Document metadata shared by the blocks (set by the reader unless noted):
  source          name of the configured source
  kind            web | edu | code | math | books
  url             the document's URL, when the source has one
  language_hint   the language the source gives: its folder (`language_from_path`), the
                  record's `language_field`, or the source's `language`
  language, language_score        set by apertus.data.language.LanguageTagger
  quality_score, toxicity_score   set by apertus.data.classifiers.ClassifierScorer
"""
