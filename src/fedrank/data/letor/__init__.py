"""LETOR-style learning-to-rank datasets as dense numpy arrays (FOLtR-ES, Sec. 5 "Datasets").

The federated online learning-to-rank experiments (FOLtR-ES and its successors) train and
evaluate on the LETOR benchmarks: LETOR 4.0 MQ2007/MQ2008 (Qin & Liu 2013, "Introducing
LETOR 4.0 Datasets", arXiv:1306.2597), LETOR 3.0 OHSUMED (Qin, Liu, Xu & Li 2010, "LETOR: A
benchmark collection for research on learning to rank for information retrieval", Inf.
Retr. 13(4)) and MSLR-WEB10K/30K, all in the svmlight ranking format, plus LightGBM's
lambdarank example. The modules:

* :mod:`fedrank.data.letor.split`: :class:`~fedrank.data.letor.split.LetorSplit` (one
  split's arrays, each query's documents on contiguous rows) and
  :class:`~fedrank.data.letor.split.LetorFold` (train / vali / test);
* :mod:`fedrank.data.letor.formats`: the file formats and their strict parsing
  (:func:`~fedrank.data.letor.formats.read_svmlight`,
  :func:`~fedrank.data.letor.formats.read_lightgbm`);
* :mod:`fedrank.data.letor.folds`: the directory layout each dataset was distributed in
  and its five cross-validation folds (:func:`~fedrank.data.letor.folds.load_fold`,
  :func:`~fedrank.data.letor.folds.load_folds`);
* :mod:`fedrank.data.letor.cache`: the ``.npz`` cache of parsed files.
"""
