package objstore

import _ "github.com/johannesboyne/gofakes3"
