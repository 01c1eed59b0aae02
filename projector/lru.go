package projector

import "container/list"

// lru holds the hot session states of one partition worker, most recently used first. Only clean
// states (written to KV) are evicted: an evicted session is read back from the KV bucket when
// its next record arrives. It is used by one goroutine only.
type lru struct {
	cap   int
	ll    *list.List // of *sessState
	items map[string]*list.Element
}

func newLRU(capacity int) *lru {
	return &lru{cap: max(capacity, 1), ll: list.New(), items: map[string]*list.Element{}}
}

func (c *lru) get(token string) *sessState {
	if e, ok := c.items[token]; ok {
		c.ll.MoveToFront(e)
		return e.Value.(*sessState)
	}
	return nil
}

// put adds or replaces the state of ss.token and evicts what it can above the capacity.
func (c *lru) put(ss *sessState) {
	if e, ok := c.items[ss.token]; ok {
		e.Value = ss
		c.ll.MoveToFront(e)
	} else {
		c.items[ss.token] = c.ll.PushFront(ss)
	}
	c.trim()
}

// remove drops the state of token.
func (c *lru) remove(token string) {
	if e, ok := c.items[token]; ok {
		c.ll.Remove(e)
		delete(c.items, token)
	}
}

// trim evicts the least recently used clean states while above the capacity.
func (c *lru) trim() {
	for e := c.ll.Back(); e != nil && c.ll.Len() > c.cap; {
		prev := e.Prev()
		if ss := e.Value.(*sessState); !ss.dirty {
			c.ll.Remove(e)
			delete(c.items, ss.token)
		}
		e = prev
	}
}
