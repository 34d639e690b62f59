"""What a visitor sends, checked in layers, outermost first:

* :mod:`.requests`: the HTTP request, before Gradio reads it (no uploads, only the documented API);
* :mod:`.fields`: each event's values, of the kind and range of the control that sends them;
* then app.core.forms: what the user typed, as a whole request (prompt, settings, model), in the app's limits.
"""
