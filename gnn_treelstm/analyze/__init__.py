"""The papers' analyses, each one command on a checkpoint writing a picture and a table.

=================  ==========================================================  ============
subcommand         what it draws                                               paper
=================  ==========================================================  ============
``tree``           one sentence's tree, predicted vs gold label at every node  Tai, Socher
``heads``          the lexicalized model's head words, agreement with rules    Teng Fig 5
``relations``      relations ranked by ``‖W_hm diag(W_mr e_r) W_mh‖_F``          Tran §6.2-3
``neighbours``     nearest-neighbour sentences: model vs mean word vectors     Tai Table 4
``length``         metric against sentence length, several runs                Tai Figs 3-4
``curves``         training loss and dev metric per epoch, several runs        —
=================  ==========================================================  ============

``gnn-treelstm analyze SUBCOMMAND --help`` (or ``python -m gnn_treelstm.analyze``) lists a
subcommand's options; every one takes ``--out PICTURE`` (``.png``, ``.svg``, ``.pdf``) and
writes its markdown table to ``--table`` (default: the picture's path with ``.md``).
"""
