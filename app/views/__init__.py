"""What every tab shows alike, from the engine's events to the page:

* :mod:`.records`: a run's StepEvents as records of tokens, heads and times;
* :mod:`.render`: the HTML of texts, legends, banners and result lines;
* :mod:`.figures` and :mod:`.plotroom`: the plotly figures and the room their labels take;
* :mod:`.palette` and :mod:`.heads`: the colours of the heads and their names.
"""
