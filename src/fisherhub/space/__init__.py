"""The Spaces: web apps (Gradio) over what fisherhub computes, each a thin app file in ``hub_cards/`` over
importable, tested logic here.

- ``browse``: a signature index read for browsing (rows, filters, nearest neighbours, a target's ranking,
  links to the Hub, snippets); no Gradio;
- ``metric_view``: the metric Space's result for two signature files; no Gradio;
- ``text``: Markdown and links made of what repos publish (escaped), numbers with their error bars;
- ``index_app``, ``metric_app``: the Gradio pages over them (Gradio is the optional ``[space]`` extra, imported
  only when a page is built);
- ``publish``: the files of each Space, the index a Space reads, pushing a Space in one commit, serving one here.
"""
