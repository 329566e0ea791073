"""The release stage (RECIPE.md §9): the base and aligned models in Hugging Face format with their
evaluation, data funnel, model card and a manifest of every file (`bundle`, `card`; entry point
`stage`), and the upload of that folder to the Hugging Face Hub in one tagged commit (`hub`).
`config` types the ``release:`` section."""
