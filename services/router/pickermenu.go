package router

import (
	"fmt"
	"strings"

	"github.com/switchboard-chat/switchboard/pkg/chunk"
	deliveryv1 "github.com/switchboard-chat/switchboard/pkg/gen/switchboard/delivery/v1"
	"github.com/switchboard-chat/switchboard/pkg/sessionstore"
)

// Hermes's Discord /model picker (its ModelPickerView) is not the
// Telegram keyboard: two steps of select menus, editing the message in
// place. First "Select a provider:" with a menu of the providers
// ("Choose a provider...", each "<name> (<n> models)", the current one
// described "current") and a red Cancel; choosing the provider shows
// its models in up to three menus of 25 ("Choose a model from
// <name>..." or, with more than one, "(1/2)"), no page buttons (past
// 75, "<n> more available — type `/model <name>` directly"), then
// "◀ Back" and Cancel. Choosing a model switches it ("⚙ Model
// Switched"). Switchboard has one provider, so the first menu has one
// option. A menu's option is the press of a button (the model's typed
// command, or /model with data "v" for the provider's models, "b" for
// Back), read as the Telegram picker's are.

// menuPlatforms are the platforms whose pickers are Hermes's select
// menus rather than its keyboard of buttons.
var menuPlatforms = map[string]bool{"discord": true}

const (
	// menuOptions is how many options a Discord select menu takes.
	menuOptions = 25
	// modelMenus is how many menus of models Hermes's view shows (a
	// message takes five rows, two kept for Back and Cancel).
	modelMenus = 3
	// menuLabel is the longest option label Discord takes, in UTF-16
	// code units (Hermes cuts there).
	menuLabel = 100

	menuSwitched = "⚙ **Model Switched**"
)

// menuProviders is the first step of the Discord picker of owner tag
// ("" a DM's): the session's model, the provider, and the menu of
// providers.
func (s *Service) menuProviders(sess sessionstore.Session, models []string, tag string) (string, *deliveryv1.Picker) {
	current := s.currentModel(sess)
	if current == "" {
		current = "unknown"
	}
	label := s.providerLabel()
	text := fmt.Sprintf("%s\n\nCurrent model: `%s`\nProvider: %s\n\nSelect a provider:", pickerHeader, current, label)
	option := &deliveryv1.PickerChoice{
		Label:       chunk.UTF16.Cut(fmt.Sprintf("%s (%d models)", label, len(models)), menuLabel),
		Description: "current", Command: "/model", Data: tagged("v", tag),
	}
	return text, &deliveryv1.Picker{Rows: []*deliveryv1.PickerRow{
		{Placeholder: "Choose a provider...", Choices: []*deliveryv1.PickerChoice{option}},
		{Choices: []*deliveryv1.PickerChoice{menuCancel(tag)}},
	}}
}

// menuModels is the second step: the provider's models in up to
// modelMenus menus, Back and Cancel.
func (s *Service) menuModels(models []string, tag string) (string, *deliveryv1.Picker) {
	label := s.providerLabel()
	shown := min(len(models), modelMenus*menuOptions)
	menus := (shown + menuOptions - 1) / menuOptions
	picker := &deliveryv1.Picker{}
	for i := 0; i < menus; i++ {
		placeholder := "Choose a model from " + label
		if menus > 1 {
			placeholder += fmt.Sprintf(" (%d/%d)", i+1, menus)
		}
		row := &deliveryv1.PickerRow{Placeholder: placeholder + "..."}
		for j := i * menuOptions; j < min((i+1)*menuOptions, shown); j++ {
			c := modelChoice(models, j, "", tag)
			c.Label = chunk.UTF16.Cut(menuModelName(models[j]), menuLabel)
			row.Choices = append(row.Choices, c)
		}
		picker.Rows = append(picker.Rows, row)
	}
	picker.Rows = append(picker.Rows, &deliveryv1.PickerRow{Choices: []*deliveryv1.PickerChoice{
		{Label: "◀ Back", Command: "/model", Data: tagged("b", tag)},
		menuCancel(tag),
	}})
	extra := ""
	if len(models) > shown {
		extra = fmt.Sprintf("\n*%d more available — type `/model <name>` directly*", len(models)-shown)
	}
	return fmt.Sprintf("%s\n\nProvider: **%s**\nSelect a model:%s", pickerHeader, label, extra), picker
}

// menuCancel is the red Cancel of a Discord picker.
func menuCancel(tag string) *deliveryv1.PickerChoice {
	return &deliveryv1.PickerChoice{Label: "Cancel", Command: "/model", Data: tagged("x", tag), Danger: true}
}

// menuModelName is a model's short name, after its last '/' (Hermes's
// option label).
func menuModelName(id string) string {
	if i := strings.LastIndexByte(id, '/'); i >= 0 && i < len(id)-1 {
		return id[i+1:]
	}
	return id
}

// pickerCancelText and pickerSwitchedText are what replaces a picker
// cancelled or answered with a switch: on Discord under Hermes's embed
// titles.
func pickerCancelText(platform string) string {
	if menuPlatforms[platform] {
		return pickerHeader + "\n\n" + pickerCancelled
	}
	return pickerCancelled
}

func pickerSwitchedText(platform, text string) string {
	if menuPlatforms[platform] {
		return menuSwitched + "\n\n" + text
	}
	return text
}
