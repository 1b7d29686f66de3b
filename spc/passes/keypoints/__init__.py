"""The questions fuse-keypoints asks of the host post-processing, one module each
(passes/fuse_keypoints.py says the method): ``trial`` runs the region on trial maps, ``roles``
finds each output's role and layout, ``threshold`` the threshold, ``window`` the kept window and
the cut border's fill, ``agreement`` the limit and the final check against spc.Keypoints;
``recognise`` asks them in order."""
