"""Pictures and pages: attention heat maps, graph and caption figures, HTML explanations, the
panels logged to dashboards, and the plots of attnflow-report. Nothing of training."""
