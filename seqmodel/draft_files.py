"""The files a draft head's directory holds beside the retriever's names (seqmodel.files)."""

DRAFT_FILE = "draft.json"  # the head's config, token space, inputs and the retriever it is for
